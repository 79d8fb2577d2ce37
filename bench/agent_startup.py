"""Agent start-up and KV-cache reuse: what a user waits for, and what each turn costs.

1. `nanocode --version` wall time (a subprocess of the installed entry point; median of --runs):
   argparse only, no jax.
2. The TUI (agent/tui/app.py) started the way `nanocode` starts it (cli.parse_args, resolve_model,
   tui.Loader, NanocodeApp), in a fresh process per run, timed from the spawn: until the input is
   focused and enabled (the model is still loading on the loader thread: checked and reported),
   until the model is loaded (the Agent is built), and until a first reply of 8 tokens is done
   (prefill + decode compiles, or loads from the persistent compilation cache). Choice: Textual's
   App.run_test (headless driver) rather than a pty: the app, its mount, focus and the loader
   thread are the real ones and the stamps are exact; what is not measured is the terminal
   drawing the first frame (a few ms). The first run uses an empty compilation cache (cold), the
   others reuse it (warm, what every later start sees); medians of the warm runs.
3. A scripted 10-turn session (a Read call and a reply on even turns, a plain reply on odd ones)
   on the same checkpoint: tokens prefilled per turn (new tokens only) against the context length
   and against what re-prefilling the whole history at every generation would cost; turn times
   are from a second pass (the first compiles every cache bucket the session grows through).

The model is a checkpoint saved here with random weights: --preset tiny (4 layers, width 64, the
tests' shape) or a nanocode preset (e.g. cpu-d4) with the small test tokenizer (512 ids, so the
system prompt is ~290 tokens), context 2048.

    python bench/agent_startup.py                     # tiny, 5 runs
    python bench/agent_startup.py --preset cpu-d4 --runs 3

Every import of ours, jax's and textual's is inside the function that needs it: the TUI child is
this script, timed from its spawn, so its top level must add nothing to what `nanocode` imports.
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def make_checkpoint(preset: str, out: Path) -> Path:
    import jax

    from nanocode.checkpoint import save
    from nanocode.config import GPTConfig, preset as named
    from nanocode.gpt import init_params
    from nanocode.protocol import system_prompt
    from nanocode.tokenizer import train_tokenizer
    texts = [system_prompt("{cwd}")] * 3 + ["def main():\n    return 1\n" * 20, "let me look. done: x is 1.\n" * 5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = train_tokenizer(iter(texts), 512)
    shape = dict(vocab_size=tok.vocab_size, sequence_len=2048)
    cfg = GPTConfig(n_layer=4, n_embd=64, n_head=4, n_kv_head=2, head_dim=16, **shape) \
        if preset == "tiny" else named(preset, **shape)
    ckpt = out / "run" / "checkpoints"
    save(ckpt, 1, init_params(cfg, jax.random.PRNGKey(0)), config=cfg, tokenizer=tok)
    return ckpt


def tui_child(ckpt: str, cwd: str) -> None:
    """One `nanocode` start in this fresh process; prints wall-clock stamps as JSON."""
    from agent import cli
    from agent.model import resolve_model
    from agent.tui import app as tui
    args = cli.parse_args(["--model", ckpt, "--cwd", cwd, "--max-tokens", "8"])
    loader = tui.Loader(cli.agent_options(args), Path(cwd), resolve_model(args.model)[0])
    app = tui.NanocodeApp(loader=loader, model_name=loader.name)
    stamps = {}

    async def main():
        async with app.run_test(size=(100, 30)) as pilot:
            inp = app.query_one(tui.HistoryInput)
            while not (app.focused is inp and not inp.disabled):
                await pilot.pause(0.001)
            stamps["input"], stamps["still_loading"] = time.time(), app.agent is None
            while app.agent is None:
                await pilot.pause(0.005)
            stamps["loaded"] = time.time()
            inp.value = "hi"
            await pilot.press("enter")
            while app.turns < 1:
                await pilot.pause(0.005)
            stamps["reply"] = time.time()
    asyncio.run(main())
    print(json.dumps(stamps))


def time_tui(ckpt: Path, work: Path, home: Path) -> dict:
    env = {**os.environ, "NANOCODE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    t0 = time.time()
    out = subprocess.run([sys.executable, __file__, "--tui-child", str(ckpt), str(work)],
                         env=env, capture_output=True, text=True, check=True).stdout
    s = json.loads(out.strip().splitlines()[-1])
    return {"input": s["input"] - t0, "loaded": s["loaded"] - t0, "reply": s["reply"] - t0,
            "still_loading": s["still_loading"]}


def ten_turns(ckpt: Path, work: Path) -> list[dict]:
    from nanocode.load import load_engine
    engine = load_engine(ckpt)
    tok = engine.tokenizer
    end = [tok.encode_special("<|assistant_end|>")]
    replies = []
    for i in range(10):
        if i % 2 == 0:
            replies.append(tok.encode("let me look.") + tok.encode_tool_call(
                {"name": "Read", "args": {"file_path": "a.py"}}))
        replies.append(tok.encode(f"done: turn {i} checked.") + end)
    session_rows(engine, work, replies)  # a first pass compiles every bucket it grows through
    return session_rows(engine, work, replies)


def session_rows(engine, work: Path, replies) -> list[dict]:
    """One scripted session: per turn, tokens prefilled / generated, context after, the
    context a no-reuse engine would prefill at every generation, wall ms."""
    import numpy as np

    from agent.loop.driver import Agent
    from agent.samplers.engine import EngineSampler
    from agent.settings import SamplerSettings
    from tools.permissions import Policy
    at, starts = [-1], []  # reply index; context length at the start of each generation

    def force(out):  # the scripted model: only the next token of the current reply
        if not out:
            at[0] += 1
            starts.append(len(agent.sampler.cache.ids))
        seq = replies[at[0]]
        if len(out) >= len(seq):
            return None
        m = np.zeros(engine.cfg.vocab_size, bool)
        m[seq[len(out)]] = True
        return m

    agent = Agent(EngineSampler(engine, work, SamplerSettings(max_tokens=64), extra_mask=force), work,
                  Policy.load(work, mode="auto"))
    rows, decoders = [], set()
    for i in range(10):
        st0, n0, t = dict(agent.sampler.cache.stats), len(starts), time.perf_counter()
        agent.run_turn(f"turn {i}: check a.py")
        st = agent.sampler.cache.stats
        rows.append({"turn": i + 1, "prefilled": st["prefilled_total"] - st0["prefilled_total"],
                     "generated": st["generated_total"] - st0["generated_total"],
                     "context": len(agent.sampler.cache.ids), "no_reuse": sum(starts[n0:]),
                     "ms": (time.perf_counter() - t) * 1e3})
        decoders.add(id(agent.sampler.cache))
    assert len(decoders) == 1, "the Decoder was rebuilt: the cache was not reused"
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny",
                    help="tiny (4 layers, width 64) or a nanocode preset, e.g. cpu-d4")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tui-child", nargs=2, metavar=("CKPT", "CWD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tui_child:
        return tui_child(*args.tui_child)
    tmp = Path(tempfile.mkdtemp(prefix="nanocode-bench-"))
    try:
        work, home = tmp / "proj", tmp / "home"
        work.mkdir()
        (work / "a.py").write_text("x = 1\n")
        ckpt = make_checkpoint(args.preset, tmp)
        exe = shutil.which("nanocode") or str(Path(sys.executable).parent / "nanocode")
        version = []
        for _ in range(args.runs):
            t = time.perf_counter()
            subprocess.run([exe, "--version"], check=True, capture_output=True)
            version.append(time.perf_counter() - t)
        runs = [time_tui(ckpt, work, home) for _ in range(args.runs + 1)]
        cold, warm = runs[0], runs[1:]
        assert all(r["still_loading"] for r in runs), "the input was only ready after the model"
        med = lambda key: statistics.median(r[key] for r in warm)  # noqa: E731
        rows = ten_turns(ckpt, work)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"model: {args.preset} random weights, context 2048; {args.runs} runs "
          f"(TUI: 1 cold + {args.runs} warm); {os.cpu_count()} CPUs\n")
    print("| measurement | cold cache | warm (median) |\n|---|---:|---:|")
    print(f"| `nanocode --version` wall | | {statistics.median(version) * 1e3:.0f} ms |")
    for key, what in (("input", "TUI accepts input (model still loading)"),
                      ("loaded", "model loaded (Agent ready)"),
                      ("reply", "first 8-token reply done (compile or cache load)")):
        print(f"| {what} | {cold[key]:.2f} s | {med(key):.2f} s |")
    print("\n| turn | new tokens prefilled | generated | context after | re-prefill without "
          "cache reuse | turn ms |\n|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['turn']} | {r['prefilled']} | {r['generated']} | {r['context']} | "
              f"{r['no_reuse']} | {r['ms']:.0f} |")
    total = sum(r["prefilled"] for r in rows)
    print(f"| all | {total} | {sum(r['generated'] for r in rows)} | {rows[-1]['context']} | "
          f"{sum(r['no_reuse'] for r in rows)} | {sum(r['ms'] for r in rows):.0f} |")


if __name__ == "__main__":
    main()
