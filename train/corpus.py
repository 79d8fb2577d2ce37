"""Which documents make the local pretraining corpus: sources, archives and deduplication (the
content filters are train/corpus_filters.py's).

Sources (`--src`) are directory trees, and source archives anywhere in them or named directly
(wheels, zip and tar sdists); a pip cache, a wheelhouse or an offline package index is one tree
holding many. One file is one document: code (.py) or text (READMEs, .md/.rst/.txt, a wheel's long
description). `exclude` globs match the path below the root, inside archives too, so the packages
the eval splits draw from stay out whichever way they come (find_inputs). A document is dropped,
and counted under its reason (REASONS), when classify (corpus_filters) or unique says so. Which
copy of a duplicate survives depends only on the keys, never on the number of worker processes:
a build is byte-identical for any N.

Trade-offs. Near duplicates are looked for between archives and trees, not inside one: inside a
package, similar files are mostly deliberate (parallel implementations, per-case tests), and
across packages is where the waste is (the versions of one package in an index, vendored copies).
Documents with fewer than MIN_SHINGLES distinct shingles (~20 words) are judged on exact
duplicates only: their Jaccard estimate means little.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import multiprocessing as mp
import os
import re
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from tqdm import tqdm

from train.corpus_filters import MAX_DOC_BYTES, classify

EXTENSIONS = {"code": (".py",), "text": (".md", ".rst", ".txt")}
README = re.compile(r"(?i)readme(?:\.(?:md|rst|txt|markdown))?")
ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "node_modules"}  # below a source root
REASONS = ("bad_archive", "unreadable", "huge", "binary", "empty", "licence", "generated", "minified",
           "duplicate", "near_duplicate")  # in the order they are checked: the first that applies counts
# unreadable: an OS error reading the file; bad_archive: a corrupt or truncated archive, skipped
# whole with a one-line warning naming it (the build goes on); the others: classify, unique
BYTES_PER_TOKEN = 3.8  # for the report's token ESTIMATE: the tokenizer is trained after the data


class DataError(ValueError):
    """A problem with the data the user can fix; the CLI prints it as one line and exits 2."""


NEAR_DUP = 0.8
SHINGLE = 5
MIN_SHINGLES = 20
NUM_PERM, BANDS = 128, 16


def _fixed(name: str, n: int) -> np.ndarray:
    """n odd uint64 constants, the same on every machine and numpy version (unlike a numpy RNG stream)."""
    return np.frombuffer(hashlib.shake_128(name.encode()).digest(8 * n), dtype="<u8") | np.uint64(1)


_PERM_A, _PERM_B = _fixed("minhash a", NUM_PERM), _fixed("minhash b", NUM_PERM)
_MIX = _fixed("shingle", SHINGLE)
TOKEN_P = 0x100000001B3  # odd, so invertible mod 2**64
_WORD_BYTES = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz" + bytes(range(128, 256))
_WORDS = bytes(c if c in _WORD_BYTES else 32 for c in range(256))  # translate table: the rest -> space
_TRAILING = re.compile(rb"[ \t\f\v]+\n")


def key_hash(key: str, salt: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8,
                                          person=salt.encode()).digest(), "big")


def wanted(name: str, kind: str) -> bool:
    """Whether a file of this base name is a document of the kind."""
    return name.endswith(EXTENSIONS[kind]) or (kind == "text" and README.fullmatch(name) is not None)


def is_archive(name: str) -> bool:
    return name.endswith(ARCHIVES)


def _excluded(below: str, exclude: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(below, g) for g in exclude)


# --- listing ------------------------------------------------------------------------------------


def find_inputs(sources: list[Path], kind: str, exclude: tuple[str, ...] = ()
                ) -> tuple[list[tuple[str, int, Path]], list[Path], int]:
    """(files, archives, excluded) under the sources, deduplicated by real path.

    files: (key, source index, path) of the kind's plain files in walk order; archives: the archive
    files (named directly or found in the trees) in walk order; excluded: how many plain files an
    `exclude` glob left out. DataError for a source that is neither a directory nor an archive.
    

    code: .py files; text: README*, .md, .rst and .txt files, and a wheel's
    *.dist-info/METADATA body (its long description; skipped when empty or UNKNOWN); other
    dist-info and egg-info files are not read. A document's key is <tree root's name>/<path below
    it> for a file of a tree and <archive file name>/<path inside> for a member of an archive.
    `exclude` matches below a tree's root, inside a wheel (below `<name>.data/purelib/` where
    present), inside an sdist below its leading `name-version/` folder (and below `src/` as well).
    """
    files, archives, seen, excluded = [], [], set(), 0
    for si, root in enumerate(map(Path, sources)):
        if root.is_file() and is_archive(root.name):
            if os.path.realpath(root) not in seen:
                seen.add(os.path.realpath(root))
                archives.append(root)
            continue
        if not root.is_dir():
            raise DataError(f"source {root} is not a directory or a source archive ({', '.join(ARCHIVES)})")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                                 and not (kind == "text" and d.endswith((".dist-info", ".egg-info"))))
            for name in sorted(filenames):
                path = Path(dirpath, name)
                doc, archive = wanted(name, kind), is_archive(name)
                if not (doc or archive) or path.is_symlink():
                    continue
                real = os.path.realpath(path)
                if real in seen:
                    continue
                below = path.relative_to(root).as_posix()
                if doc and _excluded(below, exclude):
                    excluded += 1
                    continue
                seen.add(real)
                if archive:
                    archives.append(path)
                else:
                    files.append((f"{root.name}/{below}", si, path))
    return files, archives, excluded


# --- reading archives ---------------------------------------------------------------------------


def _archive_members(path: Path):
    """(path inside, size, read() -> bytes) for each regular file of a zip or tar archive."""
    if path.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, info.file_size, lambda info=info: zf.read(info)
    else:
        with tarfile.open(path, "r|*") as tf:  # a stream: each member is read as it goes by
            for m in tf:
                if m.isfile():
                    yield m.name, m.size, lambda m=m: tf.extractfile(m).read()


def _archive_stem(name: str) -> str:
    return next(name[: -len(s)] for s in ARCHIVES if name.endswith(s))


def member_paths(archive: str, inside: str) -> list[str]:
    """The paths below the archive's root that exclude globs are matched against."""
    parts = inside.removeprefix("./").split("/")
    if archive.endswith(".whl"):
        if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
            parts = parts[2:]
        return ["/".join(parts)]
    if len(parts) > 1 and (parts[0] == _archive_stem(archive) or re.fullmatch(r"[\w.+-]+-\d[\w.+!-]*", parts[0])):
        parts = parts[1:]  # an sdist's name-version/ folder
    return ["/".join(parts)] + (["/".join(parts[1:])] if len(parts) > 1 and parts[0] == "src" else [])


def _archive_wants(inside: str, kind: str) -> str | None:
    """'doc', 'metadata' or None: whether an archive member is a document of the kind."""
    parts = inside.split("/")
    dirs, name = parts[:-1], parts[-1]
    if any(d in SKIP_DIRS or (d.startswith(".") and d not in (".", "..")) or d.endswith(".egg-info")
           for d in dirs):
        return None
    if any(d.endswith(".dist-info") for d in dirs):
        return "metadata" if kind == "text" and name == "METADATA" and len(dirs) == 1 else None
    return "doc" if wanted(name, kind) else None


def read_archive(path: Path, kind: str, exclude: tuple[str, ...]):
    """([(key, position, bytes or None, reason)], excluded) for the kind's members of an archive.

    The archive's errors (corrupt, truncated) propagate: read_unit skips the archive whole.
    """
    docs, excluded = [], 0
    for pos, (inside, size, read) in enumerate(_archive_members(path)):
        what = _archive_wants(inside, kind)
        if what is None:
            continue
        if exclude and any(_excluded(p, exclude) for p in member_paths(path.name, inside)):
            excluded += 1
            continue
        key = f"{path.name}/{inside}"
        if size > MAX_DOC_BYTES:
            docs.append((key, pos, None, "huge"))
            continue
        data = read()
        if what == "metadata":  # the long description: the body after the headers
            body = data.replace(b"\r\n", b"\n").partition(b"\n\n")[2]
            data = b"" if body.strip() == b"UNKNOWN" else body
        docs.append((key, pos, data, ""))
    return docs, excluded


# --- fingerprints -------------------------------------------------------------------------------

_POWERS: list[np.ndarray] = []  # TOKEN_P**k and TOKEN_P**-k mod 2**64 for k <= MAX_DOC_BYTES, per process


def _powers() -> list[np.ndarray]:
    if not _POWERS:
        up = np.full(MAX_DOC_BYTES + 1, TOKEN_P, dtype=np.uint64)
        down = np.full(MAX_DOC_BYTES + 1, pow(TOKEN_P, -1, 2**64), dtype=np.uint64)
        up[0] = down[0] = 1
        _POWERS.extend((np.cumprod(up), np.cumprod(down)))  # wraps mod 2**64
    return _POWERS


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: scrambles the bits of each uint64 (the hashes above are linear)."""
    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def minhash(data: bytes) -> bytes | None:
    """NUM_PERM uint32 minima over the distinct SHINGLE-word shingles of a UTF-8 text, as bytes; None
    when there are fewer than MIN_SHINGLES distinct shingles. Words are runs of ASCII letters, digits,
    _ and non-ASCII bytes; all of it is numpy over the bytes, no Python loop per word."""
    buf = np.frombuffer(data.translate(_WORDS), dtype=np.uint8)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], buf != 32, [False])).view(np.int8)))
    starts, ends = edges[0::2], edges[1::2]
    if len(starts) < SHINGLE + MIN_SHINGLES - 1:
        return None
    up, down = _powers()  # a word's hash: sum of byte_k * P**(k - start), from prefix sums
    prefix = np.zeros(len(buf) + 1, dtype=np.uint64)
    np.cumsum(buf * up[:len(buf)], out=prefix[1:])
    h = _mix((prefix[ends] - prefix[starts]) * down[starts])
    n = len(h) - SHINGLE + 1
    shingles = h[:n] * _MIX[0]
    for j in range(1, SHINGLE):
        shingles += h[j:j + n] * _MIX[j]  # a hash of the SHINGLE words in order
    shingles = _mix(shingles)
    shingles.sort()
    shingles = shingles[np.concatenate(([True], shingles[1:] != shingles[:-1]))]
    if len(shingles) < MIN_SHINGLES:
        return None
    sig = np.full(NUM_PERM, np.iinfo(np.uint64).max, dtype=np.uint64)
    block = np.empty((NUM_PERM, 4096), dtype=np.uint64)
    for start in range(0, len(shingles), 4096):  # permutation i: x -> (a_i * x + b_i) mod 2**64
        x = shingles[start:start + 4096]
        b = block[:, :len(x)]
        np.multiply(_PERM_A[:, None], x[None, :], out=b)
        b += _PERM_B[:, None]
        np.minimum(sig, b.min(axis=1), out=sig)
    return (sig >> np.uint64(32)).astype(np.uint32).tobytes()


def exact_hash(data: bytes) -> bytes:
    """The same for UTF-8 texts that differ only in line endings and trailing whitespace."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if b" \n" in data or b"\t\n" in data or b"\f\n" in data or b"\v\n" in data:
        data = _TRAILING.sub(b"\n", data)
    return hashlib.blake2b(data.rstrip(), digest_size=16).digest()


# --- reading and filtering: one unit of work, run in a worker process ---------------------------

_fingerprints: dict[bytes, tuple[bytes, bytes | None]] = {}  # content hash -> (exact, sig), per process


def read_unit(task: tuple) -> tuple:
    """task = (unit, "files", [(key, position, path)], kind, exclude) or (unit, "archive", (path,),
    kind, exclude) -> (unit, docs, dropped {reason: n}, excluded, warning or None), where docs are
    the (key, position, bytes, content hash, exact hash, MinHash or None) that pass classify()."""
    unit, what, items, kind, exclude = task
    dropped: dict[str, int] = {}
    if what == "archive":
        try:
            raw_docs, excluded = read_archive(Path(items[0]), kind, exclude)
        except Exception as e:  # BadZipFile, tarfile.ReadError, EOFError, zlib.error, lzma.LZMAError, OSError...
            return unit, [], {"bad_archive": 1}, 0, (f"skipped {items[0]}: corrupt or unreadable archive "
                                                     f"({type(e).__name__}: {e})")
    else:
        raw_docs, excluded = [], 0
        for key, pos, path in items:
            try:
                if os.stat(path).st_size > MAX_DOC_BYTES:
                    raw_docs.append((key, pos, None, "huge"))
                    continue
                with open(path, "rb") as f:
                    raw_docs.append((key, pos, f.read(), ""))
            except OSError:
                raw_docs.append((key, pos, None, "unreadable"))
    docs = []
    for key, pos, data, why in raw_docs:
        text, why = (None, why) if why else classify(data, key, kind)
        if text is None:
            dropped[why] = dropped.get(why, 0) + 1
            continue
        raw = hashlib.blake2b(data, digest_size=16).digest()
        if raw not in _fingerprints:  # the versions of a package share most files: hash them once
            if len(_fingerprints) > 200_000:
                _fingerprints.clear()
            _fingerprints[raw] = exact_hash(data), minhash(data)
        docs.append((key, pos, data, raw, *_fingerprints[raw]))
    return unit, docs, dropped, excluded, None


# --- the parent: read everything in parallel, then decide duplicates in build order --------------


INLINE_BYTES = 8_000_000  # sources smaller than this are read in this process: a pool costs more


def default_workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cpus))


def gather(sources: list[Path], kind: str, exclude: tuple[str, ...] = (), workers: int | None = None,
           progress: bool = True) -> tuple[list[tuple], dict[str, int], dict]:
    """Read and filter every candidate document of the sources with `workers` processes.

    Returns (docs, dropped, info): docs = (key, bytes, exact hash, MinHash, scope) in build order
    (sorted by a hash of the key), dropped = counts per reason so far, info = counts of files,
    archives, excluded, the warnings and the workers used. A document's scope is its archive or tree.
    """
    files, archives, excluded = find_inputs(sources, kind, exclude)
    tasks, batch, size, batch_bytes = [], [], 0, 0
    for pos, (key, si, path) in enumerate(files):  # plain files in batches of ~4 MB / 256 files
        try:
            n = path.stat().st_size
        except OSError:
            n = 0
        batch.append((key, pos, str(path)))
        size, batch_bytes = size + n, batch_bytes + n
        if len(batch) == 256 or batch_bytes > 4_000_000 or pos + 1 == len(files) or files[pos + 1][1] != si:
            tasks.append((batch_bytes, (len(tasks), "files", batch, kind, exclude), ("tree", si)))
            batch, batch_bytes = [], 0
    for path in archives:
        n = path.stat().st_size
        size += n
        tasks.append((n, (len(tasks), "archive", (str(path),), kind, exclude), ("archive", len(tasks))))
    scope = {task[0]: sc for _, task, sc in tasks}
    weight = {task[0]: n for n, task, _ in tasks}
    todo = [task for _, task, _ in sorted(tasks, key=lambda t: -t[0])]  # big first: no long pole at the end
    workers = max(1, min(workers or default_workers(), len(todo))) if size >= INLINE_BYTES else 1
    dropped = dict.fromkeys(REASONS, 0)
    docs, content, warnings, n_read = [], {}, [], 0
    bar = tqdm(total=size, desc=f"{kind}: reading", unit="B", unit_scale=True, file=sys.stderr,
               disable=None if progress else True, dynamic_ncols=True)
    with (mp.get_context("fork" if "jax" not in sys.modules else "spawn").Pool(workers)
          if workers > 1 else contextlib.nullcontext()) as pool:
        results = pool.imap_unordered(read_unit, todo, chunksize=1) if pool else map(read_unit, todo)
        for unit, got, dropped_here, excluded_here, warning in results:
            for why, n in dropped_here.items():
                dropped[why] += n
            excluded += excluded_here
            if warning:
                warnings.append(warning)
                tqdm.write(f"train data: warning: {warning}", file=sys.stderr)
            for key, pos, data, raw, exact, sig in got:
                data = content.setdefault(raw, data)  # one copy of each content in memory
                docs.append((key_hash(key, "order"), key, unit, pos, data, exact, sig, scope[unit]))
            n_read += len(got)
            bar.update(weight[unit])
            bar.set_postfix_str(f"{n_read:,} docs", refresh=False)
    bar.close()
    _fingerprints.clear()  # (the parent's, when it read the sources itself)
    docs.sort(key=lambda d: d[:4])
    info = {"files": len(files), "archives": len(archives), "excluded": excluded, "warnings": warnings,
            "workers": workers}
    return [d[1:2] + d[4:] for d in docs], dropped, info


def unique(docs: list[tuple], dropped: dict[str, int]):
    """Yield (key, bytes) of the docs, in order, less exact and near duplicates of earlier ones (counted
    in dropped). Near duplicates are looked for only in other scopes (archives, trees).

    duplicate: the same content as an earlier document once line endings and trailing whitespace
    are normalised (a module vendored into ten packages is one document); near_duplicate:
    estimated Jaccard similarity >= NEAR_DUP of its SHINGLE-word shingles to an earlier kept
    document of ANOTHER archive or tree (MinHash, NUM_PERM permutations, LSH with BANDS bands).
    "Earlier" is build order (shards.py: sorted by a hash of the key). NEAR_DUP = 0.8 with 16
    bands of 8 rows finds a pair at 0.8 with probability 0.95 and at 0.9 with 0.9999; candidates
    are confirmed on the whole signature (estimate error ~0.03), so a lucky band drops nothing.
    """
    rows = NUM_PERM // BANDS * 4  # bytes of a band
    seen: set[bytes] = set()
    buckets: list[dict[bytes, list[int]]] = [{} for _ in range(BANDS)]
    sigs: list[np.ndarray] = []
    scopes: list = []
    for i, (key, data, exact, sig, scope) in enumerate(docs):
        docs[i] = None  # let the bytes go once written
        if exact in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(exact)
        if sig is not None:
            bands = [sig[b * rows:(b + 1) * rows] for b in range(BANDS)]
            near = {c for b, band in enumerate(bands) for c in buckets[b].get(band, ()) if scopes[c] != scope}
            if near:
                mine = np.frombuffer(sig, dtype=np.uint32)
                if (np.stack([sigs[c] for c in near]) == mine).mean(axis=1).max() >= NEAR_DUP:
                    dropped["near_duplicate"] += 1
                    continue
            for b, band in enumerate(bands):
                buckets[b].setdefault(band, []).append(len(sigs))
            sigs.append(np.frombuffer(sig, dtype=np.uint32))
            scopes.append(scope)
        yield key, data
