"""The agent on the shipped model in-process vs through `nanocode serve` on loopback (--base-url).

    python bench/remote.py [--repeats 5]

Same model, same greedy tasks (fix_bug and run_command projects of `train synth`), grounding off
on both sides (a foreign server has none), interleaved runs after one warm-up of each, medians.
In-process the KV cache is reused across the turn's replies (only new tokens are prefilled);
through the server every request renders and prefills the whole conversation. Prints one JSON
object: per task the calls (identical on both sides or the run says so), seconds per task, and
the prompt tokens each side prefilled.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.model import load_engine, resolve_model  # noqa: E402
from agent.samplers.engine import EngineSampler  # noqa: E402
from agent.samplers.remote import RemoteSampler  # noqa: E402
from agent.serve import Server  # noqa: E402
from agent.serve_http import make_server  # noqa: E402
from agent.settings import SamplerSettings, TurnSettings  # noqa: E402
from tasks import build_task, drive, setup_env, task_agent  # noqa: E402

TASKS = (("fix_bug", 5), ("run_command", 3), ("fix_bug", 11))


def run(model, family: str, seed: int, base: str) -> dict:
    task = build_task(family, seed, False, base)
    sampler = model(task.root, SamplerSettings(max_tokens=300, ground=False))
    agent = task_agent(sampler, task, task.root, TurnSettings(max_steps=8))
    t0 = time.perf_counter()
    turns = drive(agent, task)
    seconds = time.perf_counter() - t0
    calls = [(c["name"], c["args"]) for t in turns for c in t.tool_calls]
    return {"seconds": seconds, "calls": calls, "answer": turns[-1].answer,
            "prompt_tokens": sum(t.usage["prompt_tokens"] for t in turns)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    setup_env()
    engine = load_engine(resolve_model(None)[0])
    httpd = make_server(Server(engine, "default"))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    sides = {"engine": lambda root, st: EngineSampler(engine, root, st),
             "server": lambda root, st: RemoteSampler(url, settings=st)}
    out = {"cpus": os.cpu_count(), "repeats": args.repeats, "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for family, seed in TASKS:
            times = {side: [] for side in sides}
            seen = {}
            for r in range(args.repeats + 1):  # the first round warms both up (compiles)
                for side, model in sides.items():
                    res = run(model, family, seed, os.path.join(tmp, f"{side}{r}"))
                    seen[side] = res
                    if r:
                        times[side].append(res["seconds"])
            same = seen["engine"]["calls"] == seen["server"]["calls"] and \
                seen["engine"]["answer"] == seen["server"]["answer"]
            med = {side: statistics.median(t) for side, t in times.items()}
            out["tasks"][f"{family}/{seed}"] = {
                "calls": len(seen["engine"]["calls"]), "same_transcript": same,
                "seconds": {k: round(v, 2) for k, v in med.items()},
                "server_over_engine": round(med["server"] / med["engine"], 2),
                "prompt_tokens": {side: seen[side]["prompt_tokens"] for side in sides}}
    httpd.shutdown()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
