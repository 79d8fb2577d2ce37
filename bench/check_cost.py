"""What running a check through tools/checks.py costs: tasks.projects.run_python and run_tests on a
small generated project, the way they ran before (subprocess.run, the caller's whole environment,
no sandbox) against the way they run now (tools/checks.run: allow-listed environment, the OS
sandbox, process-group kill), and now without the sandbox (the --unsandboxed route).

    python bench/check_cost.py [--repeats 21]

Interleaved calls (old, unsandboxed, sandboxed, old, ...) on one project (tasks/projects.py's
generate_project, seed 0), so load drifts hit all alike; medians in ms and the sandboxed/old
ratio. Checks: `python -c "import <module>"` (run_python's shape) and pytest on the project's
tests (run_tests'). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tasks.projects import generate_project, run_python, run_tests, setup_env  # noqa: E402
from tools import checks  # noqa: E402
from tools import sandbox as sbx  # noqa: E402


def old_run_tests(root: str) -> bool:
    """run_tests before tools/checks.py (commit 9526b13)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
    return r.returncode == 0


def old_run_python(root: str, code: str) -> bool:
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return r.returncode == 0


def sandbox_off(off: bool) -> None:
    """The probe's answer switched (NANOCODE_SANDBOX), re-probed outside the timed calls."""
    if off:
        os.environ[sbx.ENV_SWITCH] = "off"
    else:
        os.environ.pop(sbx.ENV_SWITCH, None)
    sbx.bash_sandbox(refresh=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=21)
    args = p.parse_args()
    setup_env()
    probe = sbx.bash_sandbox()
    if not probe["available"]:
        print(json.dumps({"error": f"no sandbox here: {probe['note']}"}))
        return 1
    os.environ[checks.UNSANDBOXED_ENV] = "1"  # for the unsandboxed route only: the probe decides
    base = tempfile.mkdtemp(prefix="nanocode-check-cost-")
    out = {"sandbox": probe["name"], "repeats": args.repeats, "cpus": os.cpu_count(),
           "uid": os.getuid()}
    try:
        proj = generate_project(random.Random(0), base)
        module = proj.modules[0][:-3].replace("/", ".")
        code = f"import {module}"
        kinds = {"run_python": {"old": lambda: old_run_python(proj.root, code),
                                "new": lambda: run_python(proj.root, code)},
                 "run_tests": {"old": lambda: old_run_tests(proj.root),
                               "new": lambda: run_tests(proj.root)}}
        for name, fns in kinds.items():
            times = {"old": [], "unsandboxed": [], "sandboxed": []}
            for _ in range(args.repeats):
                for kind in times:
                    sandbox_off(kind == "unsandboxed")
                    fn = fns["old" if kind == "old" else "new"]
                    t0 = time.perf_counter()
                    assert fn(), f"{name} ({kind}) failed on the untouched project"
                    times[kind].append(time.perf_counter() - t0)
            sandbox_off(False)
            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            out[name] = {f"{k}_ms": round(v, 1) for k, v in med.items()}
            out[name]["sandboxed_over_old"] = round(med["sandboxed"] / med["old"], 2)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
