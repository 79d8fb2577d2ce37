"""`train export`: a tiny run's newest checkpoint exported for real, through the CLI, as the agent
loads it (bf16 params equal to the source's rounded, the same config and tokenizer, metadata that
names the source), an export that refuses to overwrite, a missing run as a clear error, and the
speedrun's export stage as that same command."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tiny_models import random_params, tiny, tiny_tokenizer


def run_cli(argv):
    from train.cli import main
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with two float32 checkpoints (steps 3 and 5) with optimizer state, as
    `train sft` leaves one."""
    from nanocode import checkpoint

    tok = tiny_tokenizer(["def add(a, b):\n    return a + b\n" * 20, "the tests pass now.\n" * 20], 300)
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=64)
    run = tmp_path_factory.mktemp("runs") / "tiny-sft"
    for step, seed in ((3, 0), (5, 1)):
        params = random_params(cfg, seed)
        checkpoint.save(run / "checkpoints", step, params, config=cfg, tokenizer=tok,
                        opt_state={"mu": params}, metadata={"stage": "sft"})
    return run


def test_export_writes_the_newest_checkpoint_in_bf16(run_dir, tmp_path, capsys):
    from nanocode import checkpoint
    from nanocode.common import find_checkpoints

    out = tmp_path / "model"
    assert run_cli(["export", "--from", str(run_dir), "--out", str(out)]) == 0
    assert "exported" in capsys.readouterr().out
    ckpt, _ = find_checkpoints(str(out))  # what `--model DIR` resolves
    assert ckpt == out / "checkpoints" and checkpoint.latest_step(ckpt) == 5
    params, cfg, tok, meta = checkpoint.load_params(ckpt)
    src_params, src_cfg, src_tok, _ = checkpoint.load_params(run_dir / "checkpoints", 5)
    assert cfg == src_cfg and tok == src_tok
    assert meta["stage"] == "export" and meta["dtype"] == "bfloat16"
    assert meta["exported_from"] == str(run_dir / "checkpoints" / "5")
    assert jax.tree.structure(params) == jax.tree.structure(src_params)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(src_params)):
        assert got.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want.astype(jnp.bfloat16)))
    assert (run_dir / "checkpoints" / "5" / "opt_state").is_dir()
    assert not (ckpt / "5" / "opt_state").exists()  # params only


def test_export_refuses_to_overwrite(run_dir, tmp_path, capsys):
    out = tmp_path / "model"
    assert run_cli(["export", "--from", str(run_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    assert run_cli(["export", "--from", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "train export: error:" in err and "already holds a checkpoint" in err


def test_export_of_a_missing_run_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    assert run_cli(["export", "--from", "no-such-run", "--out", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err
    assert "train export: error: no checkpoint for 'no-such-run'" in err
    assert not (tmp_path / "model").exists()


def test_speedrun_export_stage_is_train_export(tmp_path):
    from train import speedrun
    from train.cli import build_parser

    cmd, = speedrun.stage_commands("export", speedrun.PRESETS["cpu"], tmp_path)
    assert speedrun.shown_command(cmd).startswith("train export ")
    args = build_parser().parse_args(cmd[3:])
    assert (args.command, args.from_, args.out) == ("export", f"{tmp_path}/dpo", f"{tmp_path}/model")
