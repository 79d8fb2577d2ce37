"""docs/screenshot.svg: the TUI after a turn with a Read card and an Edit with its highlighted diff.

The session is real (agent/tui/app.py on agent/loop/driver.Agent, real tools on a temporary git repo) but the
model is a tiny random one whose every token is forced by a script through `EngineSampler(extra_mask=...)`
(as in tests/test_agent_tui.py), so the picture is reproducible and needs no trained checkpoint.
Textual's pilot drives it and App.save_screenshot writes the SVG (a few seconds on a CPU). The
status line shows the tiny model's name and its real tokens/s (decode compiled beforehand).

    python bench/screenshot.py                  # writes docs/screenshot.svg
    python bench/screenshot.py --out /tmp/s.svg
"""

import argparse
import asyncio
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import jax  # noqa: E402
import numpy as np  # noqa: E402

from agent.loop.driver import Agent  # noqa: E402
from agent.samplers.engine import EngineSampler  # noqa: E402
from agent.tui.app import NanocodeApp  # noqa: E402
from agent.tui.input import HistoryInput  # noqa: E402
from nanocode.config import GPTConfig  # noqa: E402
from nanocode.engine import Engine  # noqa: E402
from nanocode.gpt import init_params  # noqa: E402
from nanocode.protocol import system_prompt  # noqa: E402
from nanocode.tokenizer import train_tokenizer  # noqa: E402
from tools.permissions import Policy  # noqa: E402

CODE = """def mean(xs):
    total = 0
    for i in range(len(xs) - 1):
        total += xs[i]
    return total / len(xs)
"""
OLD, NEW = "    for i in range(len(xs) - 1):", "    for i in range(len(xs)):"
REQUEST = "mean() looks off for [1, 2, 3], can you fix it?"


def replies(tok):
    end = [tok.encode_special("<|assistant_end|>")]

    def call(text, name, **args):
        return tok.encode(text) + tok.encode_tool_call({"name": name, "args": args})
    return [call("let me read stats.py first.", "Read", file_path="stats.py"),
            call("the loop stops one short: range(len(xs) - 1) skips the last item.", "Edit",
                 file_path="stats.py", old_string=OLD, new_string=NEW),
            tok.encode("done: mean() now sums every item (the range no longer drops the last "
                       "one), so mean([1, 2, 3]) is 2.0.") + end]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshot.svg"))
    args = ap.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = train_tokenizer(iter([system_prompt("{cwd}")] * 3 + [CODE * 5, REQUEST]), 512)
    cfg = GPTConfig(n_layer=2, n_embd=64, n_head=4, n_kv_head=2, head_dim=16,
                    vocab_size=tok.vocab_size, sequence_len=1024)
    engine = Engine(init_params(cfg, jax.random.PRNGKey(0)), cfg, tok)
    for n in (100, 200, 400, 800):  # compile decode for each cache bucket: a steady tokens/s
        warm = engine.decoder()
        warm.append([0] * n)
        list(warm.generate(max_tokens=2))
    script, at = replies(tok), [-1]

    def force(out):
        at[0] += not out
        seq = script[min(at[0], len(script) - 1)]
        if len(out) >= len(seq):
            return None
        m = np.zeros(cfg.vocab_size, bool)
        m[seq[len(out)]] = True
        return m

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "myproject"
        root.mkdir()
        (root / "stats.py").write_text(CODE)
        git = ["git", "-c", "user.name=n", "-c", "user.email=n@n", "-C", str(root)]
        for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
            subprocess.run(git + cmd, check=True)
        agent = Agent(EngineSampler(engine, root, extra_mask=force), root, Policy.load(root, mode="accept-edits"))
        app = NanocodeApp(agent=agent, model_name="tiny (scripted)")

        async def run():
            async with app.run_test(size=(110, 34)) as pilot:
                app.query_one(HistoryInput).value = REQUEST
                await pilot.press("enter")
                while app.turns < 1:
                    await pilot.pause(0.05)
                await pilot.pause(0.2)
                out = Path(args.out)
                app.save_screenshot(filename=out.name, path=str(out.parent))
        asyncio.run(run())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
