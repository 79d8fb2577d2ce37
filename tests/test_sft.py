"""`train sft`: packing (no conversation cut, only assistant tokens supervised, BOS pads with
target -1, full rows), end to end on CPU from a tiny base checkpoint (loss falls, checkpoint with
tokenizer, bitwise --resume), --warmup-steps, and clear errors."""

import json
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from test_train_base import losses

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


def corpus_texts() -> list[str]:
    texts = [json.dumps(make_conv(i)) for i in range(50)]
    for name in ("json/__init__.py", "json/decoder.py", "json/encoder.py", "textwrap.py"):
        texts.append((STDLIB / name).read_text())
    texts += ["the answer is that. anything else? that is all. done: fixed it."] * 20
    return texts


@pytest.fixture(scope="module")
def tokenizer():
    from nanocode.tokenizer import train_tokenizer
    return train_tokenizer(iter(corpus_texts()), 512)


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


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer):
    return make_base(tmp_path_factory.mktemp("base") / "base", tokenizer)


def run_cli(argv):
    from train.cli import main
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


# ---- packing --------------------------------------------------------------------------------------
def test_packing_keeps_conversations_whole_and_supervises_only_the_assistant(tokenizer):
    from train.packing import Packer, render_docs

    T = 200
    convs = [make_conv(i) for i in range(40)]
    long = {"messages": [{"role": "user", "content": "x " * 400}, {"role": "assistant", "content": "ok"}]}
    docs, too_long = render_docs(convs + [long], tokenizer, T)
    assert too_long == 1 and len(docs) == 40
    packer = Packer([docs], [(len(docs), 1.0)], T, tokenizer.bos_id, seed=3)
    rows = packer.epoch_rows(0)
    assert sorted(i for row in rows for _, i in row) == list(range(40))  # each conversation once
    bos = tokenizer.bos_id
    specials = {tokenizer.encode_special(s) for s in ("<|tool_call_start|>", "<|tool_call_end|>",
                                                     "<|assistant_end|>", "<|tool_arg|>", "<|tool_val|>")}
    used = []
    for row in rows:
        x, y = packer.materialize(row)
        assert x.shape == y.shape == (T,)
        n = sum(len(docs[i][0]) for _, i in row)
        used.append(n)
        full = np.concatenate([x, [bos]])
        # the row is exactly the conversations back to back, then BOS padding with target -1
        expect = np.concatenate([docs[i][0] for _, i in row])
        assert np.array_equal(full[:n], expect)
        assert np.all(full[n:] == bos) and np.all(y[n - 1:] == -1)
        # every supervised target is an assistant token of the conversation at that position
        mask = np.concatenate([docs[i][1] for _, i in row])
        for t in np.nonzero(y >= 0)[0]:
            assert mask[t + 1] == 1 and y[t] == full[t + 1]
            assert y[t] in specials or not tokenizer.is_special(int(y[t]))
        assert np.sum(y >= 0) == mask[1:].sum()
    assert np.mean(used) / (T + 1) > 0.85


def test_best_fit_never_overfills():
    from train.packing import best_fit_rows

    rng = np.random.default_rng(0)
    lengths = [int(v) for v in rng.integers(1, 50, 500)]
    rows = best_fit_rows(lengths, 50, buffer=64)
    assert sorted(i for r in rows for i in r) == list(range(500))
    assert all(sum(lengths[i] for i in r) <= 50 for r in rows)
    assert np.mean([sum(lengths[i] for i in r) for r in rows]) > 47


def test_stream_resumes_from_its_state(tokenizer):
    from train.packing import Packer, render_docs

    docs, _ = render_docs([make_conv(i) for i in range(30)], tokenizer, 64)
    packer = Packer([docs], [(len(docs), 2.0)], 64, tokenizer.bos_id, seed=1)
    stream = packer.stream(None)
    first = [next(stream) for _ in range(25)]  # crosses an epoch boundary
    resumed = Packer([docs], [(len(docs), 2.0)], 64, tokenizer.bos_id, seed=1).stream(first[9][1])
    for (x, _), ((x2, _), _) in zip([f[0] for f in first[10:]], resumed):
        assert np.array_equal(x, x2)


def test_data_specs_and_weights():
    from train.conversations import parse_source
    from train.packing import epoch_order

    assert parse_source("a.jsonl") == ("a.jsonl", 1.0)
    assert parse_source("a.jsonl*3") == ("a.jsonl", 3.0)
    assert parse_source("owner/name*0.5") == ("owner/name", 0.5)
    with pytest.raises(ValueError, match="SOURCE\\*K"):
        parse_source("a.jsonl*x")
    items = epoch_order([(10, 2.0), (8, 0.5)], seed=0, epoch=0)
    assert sum(s == 0 for s, _ in items) == 20 and sum(s == 1 for s, _ in items) == 4


def test_warmup_steps_scale_the_first_update():
    """--warmup-steps W: the first step moves every weight 1/W as far as with no warmup."""
    import jax
    import jax.numpy as jnp

    from train.finetune import sft_optimizer

    cfg = tiny(vocab_size=64, sequence_len=32)
    params = random_params(cfg, 0)
    grads = jax.tree.map(lambda p: jnp.asarray(np.random.default_rng(1).normal(size=p.shape), p.dtype),
                         params)

    def first_update(warmup: int):
        opt = sft_optimizer(cfg, params, steps=100, batch_tokens=1024, lr_scale=1.0, warmup_steps=warmup)
        return opt.update(grads, opt.init(params), params)[0]

    plain, warm = first_update(0), first_update(10)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(warm)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a) / 10, rtol=1e-4, atol=1e-9)
    assert any(float(jnp.abs(a).max()) > 0 for a in jax.tree.leaves(plain))


# ---- end to end -----------------------------------------------------------------------------------
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
