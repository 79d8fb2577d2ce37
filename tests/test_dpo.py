"""`train dpo` (IPO): the loss against hand-computed values, fixed-shape buckets with weight-0
fillers, a frozen reference, and end to end on CPU: held-out preference accuracy rises."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from tiny_models import tiny
from train_helpers import make_base, make_conv, pair, run_cli, write_jsonl


def test_ipo_loss_by_hand():
    from train.dpo import ipo_loss, preference_metrics

    # logratio chosen = -10 - (-11) = 1, rejected = -12 - (-11) = -1: h = 2; target 1/(2*0.1) = 5
    assert ipo_loss(-10.0, -12.0, -11.0, -11.0, 0.1) == pytest.approx(9.0)
    assert ipo_loss(-3.0, -3.0, -3.0, -3.0, 0.5) == pytest.approx(1.0)  # h = 0, target 1
    m = preference_metrics([(-10.0, -12.0), (-5.0, -4.0)], [(-11.0, -11.0), (-5.0, -5.0)], 0.1)
    assert m["val_loss"] == pytest.approx((9.0 + 36.0) / 2)  # second pair: h = -1
    assert m["val_acc"] == 0.5 and m["val_reward_acc"] == 0.5
    assert m["val_margin"] == pytest.approx((2.0 - 1.0) / 2)
    assert m["val_chosen_reward"] == pytest.approx(0.1 * (1.0 + 0.0) / 2)
    assert m["val_rejected_reward"] == pytest.approx(0.1 * (-1.0 + 1.0) / 2)


def test_train_loss_is_sum_over_real_pairs_and_buckets_are_fixed(tokenizer):
    from nanocode.gpt import init_params
    from train.dpo import (assemble, ipo_train_loss, make_logp, plan_epoch, render_pairs,
                           sequence_logps)

    cfg = tiny(vocab_size=tokenizer.vocab_size, sequence_len=128)
    params = init_params(cfg, jax.random.PRNGKey(0))
    long = pair(0)
    long["chosen"]["messages"][1]["content"] += " really" * 30
    pairs, too_long = render_pairs([pair(i) for i in range(3)] + [long], tokenizer, 128)
    assert too_long == 0 and [p[2] for p in pairs] == [64, 64, 64, 128]
    plan = plan_epoch(pairs, 4, seed=0, epoch=0)
    assert sorted(len(s) for s in plan) == [4, 4]  # one step per bucket, padded with fillers
    assert sorted(sum(i is None for i in s) for s in plan) == [1, 3]
    from nanocode.sharding import make_mesh
    logp = make_logp(cfg, make_mesh(""))
    pol = sequence_logps(logp, params, pairs, tokenizer.bos_id, 4)
    refs = [(c - 1.0, r + 0.5) for c, r in pol]  # pretend the reference was worse on chosen
    step = next(s for s in plan if 3 in s)
    batch = assemble(pairs, refs, step, 1, tokenizer.bos_id)
    assert batch["chosen"].shape == (1, 4, 128) and list(batch["weight"][0]) == [1, 0, 0, 0]
    total, count = ipo_train_loss(cfg, 0.1)(params, jax.tree.map(lambda x: x[0], batch))
    assert float(count) == 1.0
    assert float(total) == pytest.approx((1.5 - 5.0) ** 2, rel=1e-4)  # h = 1 + 0.5


def test_dpo_end_to_end_raises_heldout_accuracy(tokenizer, tmp_path, monkeypatch, capsys):
    from nanocode import checkpoint

    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    base = make_base(tmp_path / "base", tokenizer, seq_len=64, seed=1, noisy=True)
    train = write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(40)])
    val = write_jsonl(tmp_path / "val.jsonl", [pair(i) for i in range(40, 63)])
    run = tmp_path / "run"
    before = checkpoint.load_params(base / "checkpoints")[0]  # the reference's weights
    argv = ["dpo", "--from", str(base), "--data", str(train), "--val", str(val), "--seq-len", "64",
            "--device-batch", "8", "--steps", "30", "--lr-scale", "20", "--log-every", "5",
            "--eval-every", "15", "--save-every", "30", "--peak-flops", "1e11", "--run-dir", str(run)]
    assert run_cli(argv) == 0
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val_acc" in r]
    assert [r["step"] for r in evals] == [0, 15, 30]
    start, end = evals[0], evals[-1]
    # at step 0 the policy is the reference: no reward yet
    assert abs(start["val_chosen_reward"]) < 1e-3 and abs(start["val_rejected_reward"]) < 1e-3
    assert start["val_acc"] < 0.9
    assert end["val_acc"] > start["val_acc"] and end["val_acc"] >= 0.9, evals
    # rewards are beta * (policy - reference) log-ratios: non-zero at the end means the reference
    # stayed where it started while the policy moved
    assert end["val_loss"] < start["val_loss"] and end["val_reward_margin"] > 0
    train_losses = [r["loss"] for r in rows if set(r) == {"step", "loss"}]
    assert train_losses[-1] < train_losses[0]
    trained = checkpoint.load_params(run / "checkpoints")[0]
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(trained)))
    assert checkpoint.restore(run / "checkpoints")["metadata"]["stage"] == "dpo"


def test_dpo_rejects_conversation_rows(tokenizer, tmp_path, monkeypatch, capsys):

    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    base = make_base(tmp_path / "base", tokenizer, seq_len=64)
    data = write_jsonl(tmp_path / "convs.jsonl", [make_conv(i) for i in range(4)])
    assert run_cli(["dpo", "--from", str(base), "--data", str(data), "--seq-len", "64"]) == 2
    assert "not a preference pair" in capsys.readouterr().err
    assert Path(base).is_dir()
