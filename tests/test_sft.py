"""`train sft` (train/sft.py) end to end on CPU from a tiny base checkpoint: the loss falls, the
checkpoint carries the tokenizer, --resume is bitwise, a run tag names the run, and bad input is
a clear error. Packing is tests/test_packing.py's, the optimizer's warmup tests/test_finetune.py's."""

import json
import shutil

import pytest

from train_helpers import losses, make_base, make_conv, run_cli, write_jsonl


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer):
    return make_base(tmp_path_factory.mktemp("base") / "base", tokenizer)


SFT = ["--seq-len", "128", "--device-batch", "4", "--log-every", "1", "--eval-every", "1000",
       "--lr-scale", "20", "--sample-tokens", "0", "--peak-flops", "1e11"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("sftdata")
    train = write_jsonl(d / "train.jsonl", [make_conv(i % 6) for i in range(24)])
    val = write_jsonl(d / "val.jsonl", [make_conv(i) for i in range(6)])
    return train, val


def test_sft_end_to_end_loss_falls_and_resume_is_bitwise(base, data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    train, val = data
    run = tmp_path / "run"
    args = ["sft", "--from", str(base), "--data", f"{train}*2", "--val", str(val), *SFT,
            "--steps", "8", "--save-every", "4", "--run-dir", str(run)]
    assert run_cli(args + ["--sample-tokens", "12", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert "sample:" in out
    straight = losses(run)
    assert sorted(straight) == list(range(1, 9))
    assert straight[8] < 0.7 * straight[1], straight
    metrics = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    val_losses = [m["val_loss"] for m in metrics if "val_loss" in m]
    assert len(val_losses) == 2 and val_losses[-1] < val_losses[0]
    assert any("tok_per_s" in m and "mfu" in m for m in metrics)

    from nanocode import checkpoint
    assert checkpoint.all_steps(run / "checkpoints") == [4, 8]
    assert checkpoint.load_tokenizer(run / "checkpoints").to_dict() == checkpoint.load_tokenizer(
        base / "checkpoints").to_dict()
    # as if killed after the step-4 save: drop step 8 and resume; steps 5..8 must repeat exactly
    shutil.rmtree(run / "checkpoints" / "8")
    assert run_cli(args + ["--resume"]) == 0
    assert "resumed from" in capsys.readouterr().out
    assert losses(run) == straight  # bitwise on CPU


def test_sft_from_a_run_tag_names_the_run(base, data, tmp_path, monkeypatch):
    home = tmp_path / "home"
    shutil.copytree(base, home / "runs" / "tinybase")
    monkeypatch.setenv("NANOCODE_HOME", str(home))
    assert run_cli(["sft", "--from", "tinybase", "--data", str(data[0]), *SFT, "--steps", "1"]) == 0
    assert (home / "runs" / "tinybase-sft" / "checkpoints" / "1").is_dir()


def test_missing_from_is_a_clear_error(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    assert run_cli(["sft", "--from", "no-such-run", "--data", str(data[0])]) == 2
    err = capsys.readouterr().err
    assert "no-such-run" in err and "no checkpoint for" in err and "Traceback" not in err
    assert run_cli(["sft", "--data", str(data[0])]) == 2  # --from is required
    assert "--from" in capsys.readouterr().err


def test_bad_data_is_a_clear_error(base, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    assert run_cli(["sft", "--from", str(base), "--data", str(bad), *SFT]) == 2
    assert "no data source has a valid row" in capsys.readouterr().err


def test_a_source_without_valid_rows_is_skipped(base, data, tmp_path, capsys, monkeypatch):
    """Saved sessions: one file that ended on a rejection must not stop the others training;
    --eval-every 0 and --save-every 0 mean at the end only."""
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    args = [a if a != "1000" else "0" for a in SFT]
    assert run_cli(["sft", "--from", str(base), "--data", str(bad), str(data[0]), *args,
                    "--steps", "2", "--save-every", "0", "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr()
    assert f"data {bad}: skipped, no valid rows" in out.out + out.err
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.is_dir()) == ["2"]
    assert run_cli(["sft", "--from", str(base), "--data", str(tmp_path / "nope.jsonl"), *SFT]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


@pytest.fixture(scope="module")
def pretraining_shards(tmp_path_factory):
    """A data dir as `train data` writes it: code/ and text/, two shards each (the last = val)."""
    from train.shards import _write_shard, shard_name
    root = tmp_path_factory.mktemp("pretraining")
    for kind, text in (("code", "def f(x):\n    return x + 1\n" * 40), ("text", "the answer is that. " * 60)):
        (root / kind).mkdir()
        for i in range(2):
            _write_shard(root / kind / shard_name(i), [f"{i} {text}"] * 8, row_group=4)
    return root


def test_replay_docs_are_pieces_of_pretraining_text(pretraining_shards, tokenizer):
    from train.packing import replay_docs
    docs = replay_docs(pretraining_shards, tokenizer, 64, tokens=600, code_ratio=0.5)
    assert all(len(ids) == len(mask) <= 65 and mask[0] == 0 and mask[1:].all() for ids, mask in docs)
    text = [tokenizer.decode([int(t) for t in ids if t != tokenizer.bos_id]) for ids, _ in docs]
    assert any("return x + 1" in t for t in text) and any("the answer is" in t for t in text)
    assert not any(t.startswith("1 ") for t in text)  # the last shard is validation: never replayed
    assert 600 <= sum(len(ids) for ids, _ in docs) < 600 + 2 * 65  # the ask, to a piece


def test_sft_with_replay_trains_on_both(base, data, pretraining_shards, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    args = ["sft", "--from", str(base), "--data", str(data[0]), "--val", str(data[1]), *SFT, "--steps", "2",
            "--run-dir", str(tmp_path / "run"), "--replay", str(pretraining_shards)]
    assert run_cli(args) == 0
    out = capsys.readouterr().out
    assert "replay " in out and "pieces" in out and "% of the" in out, out
    assert run_cli(args + ["--replay-share", "1"]) == 2
    assert "--replay-share 1.0 must be between 0 and 1" in capsys.readouterr().err
