"""`train synth`'s rate on this machine: one worker, the same seed, with the tasks' commands
loading pytest's installed plugins (the reference: how they ran before 2026-12-07) against
without them (now: tasks/projects.setup_env sets PYTEST_DISABLE_PLUGIN_AUTOLOAD, which the
Bash tool passes on).

    python bench/synth_rate.py [--n 50] [--rounds 3]

Each run is its own process (a cold start: the real world's module scan and harvests included,
as in a short run); the variants alternate (reference, now, reference, ...), so load drifts hit
both alike. Reports the median seconds and conversations a second of each, their ratio, and
whether the two wrote the same conversations (tool output's timings aside: "in 0.03s"). Prints
one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the child: `train synth`, in-process (one worker), the reference taking the switch off Bash's list
CHILD = """
import sys
import tools.bash as bash
if sys.argv[1] == "reference":
    bash.ENV_ALLOW = tuple(n for n in bash.ENV_ALLOW if n != "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
from train import cli
sys.exit(cli.main(sys.argv[2:]))
"""


def run(variant: str, out: str, work: str, n: int) -> float:
    """Seconds of one synth run of `variant` writing to `out`, its projects below `work` (one path
    for every run: the prompts show it)."""
    argv = ["synth", "--out", out, "--n", str(n), "--workers", "1", "--seed", "97", "--n-eval", "0",
            "--code-ratio", "0.1", "--real-ratio", "0.5", "--workdir", work]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD, variant, *argv], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def conversations(out: str) -> list[str]:
    """The run's training conversations, pytest's timings blanked."""
    with open(os.path.join(out, "train.jsonl")) as f:
        return [re.sub(r"in \d+\.\d+s", "in Xs", line) for line in f]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=50, help="conversations a run (default: 50)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each variant (default: 3)")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="nanocode-synth-rate-")
    seconds: dict[str, list[float]] = {"reference": [], "now": []}
    made: dict[str, list[str]] = {}
    try:
        for r in range(args.rounds):
            for variant in seconds:
                out = os.path.join(tmp, f"{variant}{r}")
                seconds[variant].append(run(variant, out, os.path.join(tmp, "work"), args.n))
                if r == 0:  # the first round's conversations stand for every round's
                    made[variant] = conversations(out)
                shutil.rmtree(out)
                print(f"synth_rate: round {r + 1}/{args.rounds} {variant}: {seconds[variant][-1]:.1f} s",
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {v: statistics.median(s) for v, s in seconds.items()}
    print(json.dumps({
        "n": args.n, "rounds": args.rounds, "cpus": os.cpu_count(),
        "seconds": {v: [round(x, 1) for x in s] for v, s in seconds.items()},
        "median_s": {v: round(m, 1) for v, m in med.items()},
        "conversations_per_s": {v: round(len(made[v]) / m, 2) for v, m in med.items()},
        "speedup": round(med["reference"] / med["now"], 2),
        "same_conversations": made["reference"] == made["now"],
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
