"""What a package root gives the real-code task world: modules scanned, candidate functions,
harvested ones (recorded tests), those with recorded bugs, per top-level package, and the wall
time. Usage: python bench/real_harvest.py ROOT... [--every K] [--workers N] [--minutes M]
(--every K harvests every K-th module with a candidate: a sample, said in the output)."""
import argparse
import multiprocessing as mp
import time
from collections import Counter

from tasks.real_projects import package_pool
from tasks.real_source import candidates, harvest


def one(item: tuple[str, str]) -> tuple[str, int, int, int]:
    module, path = item
    funcs = harvest(path, module)
    return module, len(candidates(path)), len(funcs), sum(bool(f.bugs) for f in funcs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="+")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=10)
    a = ap.parse_args()
    t0 = time.time()
    modules, skipped = package_pool(tuple(a.roots))
    counts = {m: len(candidates(p)) for m, p in modules.items()}
    with_cands = [(m, p) for m, p in modules.items() if counts[m]]
    t_list = time.time() - t0
    sample = with_cands[::a.every]
    rows, done = [], time.time() + a.minutes * 60
    with mp.get_context("fork").Pool(a.workers) as pool:
        for row in pool.imap_unordered(one, sample):
            rows.append(row)
            if time.time() > done:
                break
    per = Counter()
    for m, c, h, b in rows:
        per[m.split(".")[0]] += h
    print(f"roots: {' '.join(a.roots)}\nmodules scanned: {len(modules)} of {len({m.split('.')[0] for m in modules})} "
          f"packages (skipped: {skipped}); {sum(counts.values())} candidate functions in {len(with_cands)} modules "
          f"(listing {t_list:.0f}s)")
    print(f"harvested {len(rows)} of {len(sample)} sampled modules (every {a.every}th, {a.workers} workers): "
          f"{sum(r[1] for r in rows)} candidate functions, {sum(r[2] for r in rows)} harvested, "
          f"{sum(r[3] for r in rows)} with recorded bugs; wall {time.time() - t0:.0f}s")
    print("top 10 packages by harvested functions: " + ", ".join(f"{p} {n}" for p, n in per.most_common(10)))


if __name__ == "__main__":
    main()
