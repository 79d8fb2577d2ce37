"""evals end to end on a tiny random-weights checkpoint: `evals humaneval --limit 2 --n 2` writes
its summary (pass@1 is 0 for noise), and `evals bpb` on tiny local val shards is finite."""

import json
import math
import sysconfig
from pathlib import Path

import pytest

from nanocode.checkpoint import save
from nanocode.tokenizer import train_tokenizer
from tests.tiny_models import random_params, tiny

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run dir with one checkpoint (random weights, a 300-token BPE saved with it) and val data."""
    from train.shards import build_local

    root = tmp_path_factory.mktemp("evals_model")
    prose = root / "prose"
    prose.mkdir()
    for i in range(30):
        (prose / f"n{i}.md").write_text(f"Note {i}: the river and the stone, the garden light.\n" * 3)
    data = root / "data"
    build_local("code", data / "code", [STDLIB / "json"], docs_per_shard=2, row_group=2,
                val_fraction=0.5, progress=False)
    build_local("text", data / "text", [prose], docs_per_shard=10, row_group=4, val_fraction=0.5,
                progress=False)
    texts = [p.read_text() for p in (STDLIB / "json").glob("*.py")] + ["def f(x):\n    return x\n"]
    tok = train_tokenizer(texts, 300)
    cfg = tiny(vocab_size=320, sequence_len=128)
    run = root / "runs" / "tiny"
    save(run / "checkpoints", 3, random_params(cfg), config=cfg, tokenizer=tok,
         metadata={"step": 3, "stage": "base"})
    return run, data


def test_humaneval_tiny_model_end_to_end(tiny_run, tmp_path, capsys):
    from evals import cli

    run, _ = tiny_run
    out = tmp_path / "out"
    status = cli.main(["humaneval", "--model", str(run), "--limit", "2", "--n", "2", "--k", "1",
                       "--temperature", "0.8", "--max-tokens", "16", "--out", str(out), "--quiet"])
    assert status == 0, capsys.readouterr().err
    summary = json.loads((out / "humaneval_step3.json").read_text())
    assert summary["pass@1"] == 0.0 and summary["n"] == 2 and summary["problems"] == 2
    assert (summary["model"], summary["step"], summary["mode"]) == ("tiny", 3, "completion")
    rows = [json.loads(line) for line in (out / "humaneval_step3.jsonl").read_text().splitlines()]
    assert [len(r["samples"]) for r in rows] == [2, 2]
    assert "pass@1" in capsys.readouterr().out


def test_bpb_tiny_model(tiny_run, tmp_path, capsys):
    from evals import cli

    run, data = tiny_run
    status = cli.main(["bpb", "--model", str(run / "checkpoints"), "--data", str(data), "--rows", "2",
                       "--seq-len", "32", "--batches", "1", "--out", str(tmp_path)])
    assert status == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "bpb_step3.json").read_text())
    for key in ("bpb_code", "bpb_text"):
        assert math.isfinite(summary[key]) and summary[key] > 0


def test_missing_model_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    from evals import cli

    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path))
    assert cli.main(["humaneval", "--model", "nope", "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "nope" in err and len(err.splitlines()) == 1
