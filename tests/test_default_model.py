"""The shipped default model (nanocode/default_model, the v5e speedrun's final checkpoint): small
enough to ship, loadable with its tokenizer, documented by its model card and eval JSONs, and what
`nanocode` runs with no --model: headless on a generated task project, as a fresh install would."""
import json
import subprocess
import sys
from pathlib import Path

from agent.model import resolve_model
from nanocode.common import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[1]
MAX_MB = 64  # it ships inside the package and comes back from the chip's host in 16 MiB pieces


def test_default_model_is_shipped_small_and_documented():
    from nanocode.checkpoint import latest_step
    from nanocode.common import find_checkpoints
    path = DEFAULT_MODEL
    assert resolve_model(None)[0] == path / "checkpoints" and latest_step(path / "checkpoints") is not None
    assert find_checkpoints("default")[0] == path / "checkpoints"  # `--model/--from default`
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert size < MAX_MB * 1e6, f"default model is {size / 1e6:.1f} MB"
    card = (path / "MODEL_CARD.md").read_text()
    assert "train speedrun --preset v5e" in card
    evals = {json.loads(f.read_text())["eval"] for f in (path / "evals").glob("*.json")}
    assert {"agent", "humaneval"} <= evals  # bpb: the base's, measured on the chip (the card)


def test_nanocode_runs_the_default_model_headless_on_a_task_project(tmp_path):
    """`nanocode -p` with no --model, in a fresh process, on a held-out generated project."""
    from tasks import make_task
    task = make_task("find_definition", 10**12 + 7, heldout=True, base=str(tmp_path / "tasks"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NANOCODE_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "agent.cli", "-p", task.prompt, "--output-format",
                          "json", "--max-steps", "6", "--max-tokens", "200"],
                         cwd=task.root, env=env, capture_output=True, text=True, timeout=600)
    result = json.loads(out.stdout)
    from agent.headless import EXIT_CODES  # the status tells how the run ended (0: answered)
    assert out.returncode == EXIT_CODES[result["stop_reason"]], out.stderr[-2000:]
    assert set(result) >= {"answer", "tool_calls", "files_changed", "steps", "stop_reason"}
    assert result["steps"] >= 1 and all(c["name"] in ("Read", "Edit", "Grep", "Bash", "?")
                                        for c in result["tool_calls"])
    session, = (Path(task.root) / ".nanocode" / "sessions").glob("*.jsonl")
    meta = json.loads(session.read_text())["meta"]
    assert meta["model"] == str(DEFAULT_MODEL / "checkpoints")  # no --model: the shipped one


def test_the_default_model_fine_tunes_from_fp32_masters():
    """`train sft --from default`: the shipped bf16 params come back as fp32 training masters."""
    import jax
    from train.finetune import load_start
    params, cfg, tok, ckpt = load_start("default")
    assert ckpt == DEFAULT_MODEL / "checkpoints" and tok.vocab_size == cfg.vocab_size
    assert {str(x.dtype) for x in jax.tree.leaves(params)} == {"float32"}
