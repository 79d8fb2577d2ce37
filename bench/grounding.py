"""Decode speed with every mask on (grammar + grounding) against unmasked decode, same run.

    python bench/grounding.py [--tasks 11] [--tokens 256] [--repeats 3]

Per vocabulary (4096: the shipped model and its tokenizer; 32768: the same shape with random
weights and a 32k tokenizer trained on the standard library's sources):
  decode       greedy decode of --tokens tokens after a task's prompt, unmasked (`allowed=None`)
               and with a constant device mask (the engine's masked path): median of --repeats
  mask work    the agent's hook along the oracle's replies of --tasks synth tasks (one per family,
               replayed on their projects: Grounding refreshed after Edit/Bash, as the loop does):
               GrammarState.allowed (whole names and backticked spans included), the loop
               guard (agent/masks/loop_guard.py) and a device copy of every mask not seen before.
               The grammar (one per tokenizer per process: Grammar.shared) is warmed first; each
               conversation gets a fresh Grounding, so a project's listing, anchors and word
               scan are counted every time, as in a new session
  masked       1 / (masked decode + mask work per token), as a ratio of unmasked tokens/s
The mask work is measured on the oracle's tokens, not the model's, so both vocabularies replay
the same calls (paths, old_strings, grep patterns); it is the realistic case for a model that
writes tool calls, which a random model does not.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from agent.masks.grammar import CONTENT, Grammar  # noqa: E402
from agent.masks.grounding import Grounding  # noqa: E402
from agent.masks.loop_guard import LoopGuard  # noqa: E402
from nanocode.common import DEFAULT_MODEL, enable_compilation_cache  # noqa: E402
from nanocode.engine import Engine  # noqa: E402
from nanocode.gpt import init_params  # noqa: E402
from nanocode.load import load_model  # noqa: E402
from nanocode.protocol import MODE_TOOLS, REJECTED  # noqa: E402
from nanocode.tokenizer import train_tokenizer  # noqa: E402
from tasks import EVAL_ONLY_FAMILIES, TRAIN_FAMILIES, attempt_seeds, make_task, setup_env  # noqa: E402
from tools.dispatch import run_tool  # noqa: E402


def conversations(n: int, base: str) -> list[tuple[list[dict], str]]:
    """(oracle messages, untouched project root) for n tasks, one family after another."""
    fams = TRAIN_FAMILIES + EVAL_ONLY_FAMILIES
    out = []
    for i in range(n):
        fam = fams[i % len(fams)]
        for seed in attempt_seeds(5_000 + i):
            try:
                messages = make_task(fam, seed, False, os.path.join(base, str(i))).rollout()["messages"]
                break
            except (ValueError, IndexError):
                continue
        out.append((messages, seed, fam, os.path.join(base, str(i))))
    return out


def mask_work(tok, grammar, convs, ground: bool) -> tuple[float, int]:
    """Seconds of hook work per token over every assistant reply of `convs`, and the token count."""
    total, n = 0.0, 0
    for messages, seed, fam, base in convs:
        root = make_task(fam, seed, False, base).root  # the project as it was before the rollout
        g, fed, dev = Grounding(root) if ground else None, 0, {}
        for k, msg in enumerate(messages):
            if msg["role"] != "assistant":
                continue
            t0 = time.perf_counter()
            if g is not None:
                for m in messages[fed:k]:
                    g.add_message(m)
            fed = k
            state, out = grammar.state(tools=MODE_TOOLS["auto"], ground=g), []
            loops = LoopGuard.shared(grammar).reply() if ground else None
            for t in tok.render_message(msg)[0][1:]:
                m = state.allowed(out)
                if loops is not None:
                    m = loops.mask(out, m, prose=state.phase == CONTENT)
                if id(m) not in dev:
                    dev[id(m)] = (m, jax.device_put(m))
                out.append(t)
            total += time.perf_counter() - t0
            n += len(out)
            call = msg.get("tool_call")
            if call and messages[k + 1]["content"] != REJECTED:
                run_tool(root, call["name"], call["args"])
                if g is not None and call["name"] in ("Edit", "Bash"):
                    g.refresh()
    return total / n, n


def decode_cost(engine, prompt: list[int], tokens: int, repeats: int) -> tuple[float, float]:
    """Median seconds per decoded token: unmasked, and with a constant device mask."""
    full = jax.device_put(np.ones(engine.cfg.vocab_size, bool))
    out = {}
    for name, hook in (("none", None), ("mask", lambda o: full)):
        times = []
        for r in range(repeats + 1):  # the first run compiles
            s = engine.decoder()
            s.append(prompt)
            t0 = time.perf_counter()
            n = sum(1 for _ in s.generate(max_tokens=tokens, stop=(), seed=r, allowed=hook))
            if r:
                times.append((time.perf_counter() - t0) / n)
        out[name] = statistics.median(times)
    return out["none"], out["mask"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=11)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    enable_compilation_cache()
    setup_env()
    params, cfg, tok, *_ = load_model(str(DEFAULT_MODEL))
    stdlib = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    tok32 = train_tokenizer((open(f, encoding="utf-8", errors="replace").read() for f in stdlib), 32768)
    cfg32 = dataclasses.replace(cfg, vocab_size=tok32.vocab_size)
    setups = [("4096 (shipped model)", Engine(params, cfg, tok), tok),
              ("32768 (random weights)", Engine(init_params(cfg32, jax.random.PRNGKey(0)), cfg32, tok32), tok32)]
    with tempfile.TemporaryDirectory(prefix="nanocode-bench-grounding-") as base:
        convs = conversations(args.tasks, base)
        prompt_msgs = convs[0][0][:2]
        print(f"| vocab | decode unmasked | decode, constant mask | hook, grammar | hook, grammar + grounding "
              f"| tok/s all masks on / unmasked |")
        print("|---|---|---|---|---|---|")
        for name, engine, t in setups:
            g = Grammar(t, engine.cfg.vocab_size)
            prompt = t.render_for_completion({"messages": prompt_msgs})
            none, masked = decode_cost(engine, prompt, args.tokens, args.repeats)
            mask_work(t, g, convs, ground=True)  # warm: the grammar's own one-time tables
            plain, _ = mask_work(t, g, convs, ground=False)
            grounded, n = mask_work(t, g, convs, ground=True)  # fresh Groundings: per-project cold costs in
            ratio = none / (masked + grounded)
            print(f"| {name} | {none * 1e3:.3f} ms/tok | {masked * 1e3:.3f} ms/tok | {plain * 1e6:.0f} us/tok "
                  f"| {grounded * 1e6:.0f} us/tok ({n} tokens) | {ratio:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
