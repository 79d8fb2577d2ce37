"""train/export_model.export on its own (tests/test_train_export.py drives it through the CLI): each
kind of source it takes (a run directory, a checkpoint directory, a run tag under
$NANOCODE_HOME/runs) gives the newest step as bf16 params only, with the source's config,
tokenizer and metadata plus where it came from; a missing source raises FileNotFoundError and
writes nothing; an existing export raises ValueError and keeps its bytes.

The params are random numpy arrays in the model's shapes (jax.eval_shape: nothing compiles), so
the file runs in a few seconds."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanocode import checkpoint
from nanocode.gpt import init_params
from tiny_models import tiny, tiny_tokenizer
from train.export_model import export


def numpy_params(cfg, seed):
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: (0.1 * rng.standard_normal(s.shape)).astype(s.dtype), shapes)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A NANOCODE_HOME with one run, `tiny`: float32 checkpoints at steps 2 and 4 with optimizer
    state and metadata, as `train sft` leaves them. Returns (home, step 4's params)."""
    tok = tiny_tokenizer(["def add(a, b):\n    return a + b\n" * 20, "the tests pass now.\n" * 20], 300)
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=64, n_layer=1)
    home = tmp_path_factory.mktemp("home")
    for step in (2, 4):
        params = numpy_params(cfg, step)
        checkpoint.save(home / "runs" / "tiny" / "checkpoints", step, params, config=cfg, tokenizer=tok,
                        opt_state={"mu": params}, metadata={"stage": "sft", "note": "kept"})
    return home, params


def files(d):
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["run directory", "checkpoint directory", "run tag"])
def test_each_source_exports_its_newest_step_in_bf16(home, tmp_path, monkeypatch, capsys, kind):
    home, newest = home
    monkeypatch.setenv("NANOCODE_HOME", str(home))
    ckpt = home / "runs" / "tiny" / "checkpoints"
    src = {"run directory": str(ckpt.parent), "checkpoint directory": str(ckpt), "run tag": "tiny"}[kind]
    assert export(src, str(tmp_path / "out")) == 0
    out = tmp_path / "out" / "checkpoints"
    assert sorted(p.name for p in out.iterdir()) == ["4"] and not (out / "4" / "opt_state").exists()
    assert f"exported {ckpt / '4'} -> {out / '4'}" in capsys.readouterr().out
    params, cfg, tok, meta = checkpoint.load_params(out)
    _, src_cfg, src_tok, _ = checkpoint.load_params(ckpt, 4)
    assert cfg == src_cfg and tok == src_tok
    assert meta["stage"] == "export" and meta["note"] == "kept" and meta["dtype"] == "bfloat16"
    assert meta["from"] == str(ckpt) and meta["exported_from"] == str(ckpt / "4")
    assert jax.tree.structure(params) == jax.tree.structure(newest)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(newest)):
        assert got.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(got), np.asarray(jnp.asarray(want).astype(jnp.bfloat16)))


def test_a_source_without_a_checkpoint_raises_and_writes_nothing(home, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(home[0]))
    (tmp_path / "empty_run" / "checkpoints").mkdir(parents=True)
    for src in ("no-such-run", str(tmp_path / "empty_run")):
        with pytest.raises(FileNotFoundError, match="no checkpoint for"):
            export(src, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_export_is_never_overwritten(home, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(home[0]))
    export("tiny", str(tmp_path / "out"))
    before = files(tmp_path / "out")
    with pytest.raises(ValueError, match="already holds a checkpoint; delete it to export again"):
        export("tiny", str(tmp_path / "out"))
    assert files(tmp_path / "out") == before
