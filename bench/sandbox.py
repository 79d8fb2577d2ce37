"""What the OS sandbox costs a Bash call: tools.bash.bash with and without tools/sandbox.py.

    python bench/sandbox.py [--repeats 21]

Interleaved calls (plain, sandboxed, plain, ...) in one temporary git repo, so load drifts hit
both alike; medians. Commands: `true` (the fixed cost: unshare, the bootstrap interpreter, the
mounts) and `git status` (a typical agent command). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.bash import bash  # noqa: E402
from tools.sandbox import Sandbox, bash_sandbox  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=21)
    args = p.parse_args()
    probe = bash_sandbox()
    if not probe["available"]:
        print(json.dumps({"error": f"no sandbox here: {probe['note']}"}))
        return 1
    out = {"sandbox": probe["name"], "repeats": args.repeats, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as root:
        subprocess.run(["git", "init", "-q", root], check=True)
        for command in ("true", "git status"):
            times = {"plain": [], "sandboxed": []}
            for _ in range(args.repeats):
                for kind, cfg in (("plain", None), ("sandboxed", Sandbox())):
                    t0 = time.perf_counter()
                    bash(root, {"command": command}, sandbox=cfg)
                    times[kind].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            out[command] = {f"{k}_ms": round(v, 1) for k, v in med.items()}
            out[command]["extra_ms"] = round(med["sandboxed"] - med["plain"], 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
