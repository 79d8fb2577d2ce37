"""What the training-stage tests share: tiny conversations and preference pairs in the schema
`train sft` / `train dpo` read, the corpus their tokenizer is trained on (the `tokenizer`
fixture in tests/conftest.py), a tiny base checkpoint, running `train` in-process, and reading
what a run wrote (losses, checkpoints)."""

import json
import sysconfig
import time
from pathlib import Path

from tiny_models import random_params, tiny

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def make_conv(i: int) -> dict:
    """A small agent trace: a Bash call, its result, and a lowercase answer."""
    a, b = i % 7 + 1, i % 5 + 2
    return {"messages": [
        {"role": "system", "content": "you are nanocode, a coding agent."},
        {"role": "user", "content": f"what is {a} plus {b}?"},
        {"role": "assistant", "content": "let me check.",
         "tool_call": {"name": "Bash", "args": {"command": f"python -c 'print({a}+{b})'"}}},
        {"role": "tool_result", "content": str(a + b)},
        {"role": "assistant", "content": f"the answer is {a + b}."},
    ]}


def pair(i: int) -> dict:
    """Chosen ends plainly; rejected asks "anything else?" (the style the spec forbids); both
    endings are 11 tokens with the test tokenizer, so length alone does not decide the margin."""
    a, b = i % 9 + 1, i // 9 % 7 + 2
    user = {"role": "user", "content": f"what is {a} plus {b}?"}
    return {"chosen": {"messages": [user, {"role": "assistant", "content": f"the answer is {a + b}. that is it."}]},
            "rejected": {"messages": [user, {"role": "assistant", "content": f"the answer is {a + b}. anything else?"}]}}


def corpus_texts() -> list[str]:
    texts = [json.dumps(make_conv(i)) for i in range(50)]
    for name in ("json/__init__.py", "json/decoder.py", "json/encoder.py", "textwrap.py"):
        texts.append((STDLIB / name).read_text())
    texts += ["the answer is that. anything else? that is all. done: fixed it."] * 20
    return texts


def make_base(path: Path, tokenizer, seq_len: int = 128, seed: int = 0, noisy: bool = False) -> Path:
    """A tiny base checkpoint (random init; noisy: every weight random, so the model already has
    arbitrary preferences) with its tokenizer, as `train base` would leave it."""
    import jax

    from nanocode import checkpoint
    from nanocode.gpt import init_params

    cfg = tiny(vocab_size=tokenizer.vocab_size, sequence_len=seq_len)
    params = random_params(cfg, seed) if noisy else init_params(cfg, jax.random.PRNGKey(seed))
    checkpoint.save(path / "checkpoints", 0, params, config=cfg, tokenizer=tokenizer)
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(argv):
    """`train ARGV` in this process: its exit status (argparse's SystemExit included)."""
    from train.cli import main
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def losses(run_dir) -> dict[int, float]:
    """step -> loss; a resumed run re-logs some steps, the last record of a step wins."""
    out = {}
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if set(row) == {"step", "loss"}:
            out[row["step"]] = row["loss"]
    return out


def wait_for_checkpoint(run_dir, step, proc, timeout=300):
    """Block until `step`'s checkpoint is committed; fails if `proc` exits or time runs out."""
    deadline = time.time() + timeout
    while not (Path(run_dir) / "checkpoints" / str(step) / "commit_success.txt").exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
