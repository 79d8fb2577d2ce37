"""Probe a checkpoint's first reply on synthetic tasks: is it a valid tool call, the oracle's tool,
the oracle's target (`evals agent`'s first-call-correct: same file, symbol or program)? Seconds per
run (27 prompts in 9-19 s on 2 cores), so it can follow an SFT run checkpoint by checkpoint; `evals agent` is the full measure (whole episodes, hidden checks).

    python bench/first_calls.py ~/.cache/nanocode/speedrun/cpu/sft/checkpoints --heldout --per 3
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evals.agent_score import same_target  # noqa: E402
from nanocode.load import load_engine  # noqa: E402
from nanocode.protocol import check_call  # noqa: E402
from tasks import TRAIN_FAMILIES, make_task, oracle_first_call  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a checkpoints directory (newest step is used)")
    ap.add_argument("--heldout", action="store_true", help="held-out names and phrasings")
    ap.add_argument("--per", type=int, default=3, help="prompts per trained family")
    ap.add_argument("--workdir", default="/tmp/nanocode_first_calls", help="where task projects go")
    args = ap.parse_args()
    engine = load_engine(args.checkpoint)
    tok, t0 = engine.tokenizer, time.time()
    totals = {"prompts": 0, "valid": 0, "right tool": 0, "right target": 0}
    for family in TRAIN_FAMILIES:
        row = dict.fromkeys(totals, 0)
        for seed in range(5000, 5000 + args.per):
            task = make_task(family, seed, heldout=args.heldout, base=args.workdir)
            ids = tok.render_for_completion({"messages": [{"role": "system", "content": task.system},
                                                          {"role": "user", "content": task.prompt}]})
            try:
                call = tok.parse_tool_call(engine.generate(ids, max_tokens=120)[0])
            except ValueError:  # a malformed call counts as no call
                call = None
            oracle = oracle_first_call(task)
            row["prompts"] += 1
            row["valid"] += call is not None and check_call(call["name"], call["args"]) is None
            row["right tool"] += bool(call and oracle and call["name"] == oracle["name"])
            row["right target"] += bool(call and oracle and same_target(call, oracle, task.root))
        print(f"{family:16s} " + "  ".join(f"{k} {v}" for k, v in row.items()))
        totals = {k: totals[k] + row[k] for k in totals}
    print(f"{'all':16s} " + "  ".join(f"{k} {v}" for k, v in totals.items()) + f"  ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
