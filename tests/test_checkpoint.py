"""Checkpoint round trips, retention, crash safety, errors and shardings (tiny trees, < 30 s)."""

import shutil
import sys
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from orbax.checkpoint._src.path import atomicity

from nanocode import checkpoint as ck
from nanocode.config import SMEAR_CHANNELS, VE_GATE_CHANNELS, preset

CFG = preset("cpu-d2", vocab_size=256)  # 2 layers, C=128, 2 heads of 64
# Reading a deliberately damaged checkpoint makes tensorstore call back into orbax's already-closed
# event loop ("RuntimeError: Event loop is closed", reported later by the garbage collector, in
# whichever test is running then). It is harmless noise from the damage tests, not a failure.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def make_params(cfg=CFG, seed=0):
    """A params pytree shaped like gpt.py's (bf16 embeddings, fp32 elsewhere)."""
    rng = np.random.default_rng(seed)
    C, V, KV, L = cfg.n_embd, cfg.padded_vocab, cfg.kv_dim, cfg.n_layer

    def w(*shape, dtype=jnp.float32):
        return jnp.asarray(rng.standard_normal(shape), dtype=dtype)

    blocks = []
    for i in range(L):
        attn = {"c_q": w(C, C), "c_k": w(C, KV), "c_v": w(C, KV), "c_proj": w(C, C)}
        if cfg.has_value_embed(i):
            attn["ve_gate"] = w(VE_GATE_CHANNELS, cfg.n_kv_head)
        blocks.append({"attn": attn, "mlp": {"c_fc": w(C, 4 * C), "c_proj": w(4 * C, C)}})
    return {"wte": w(V, C, dtype=jnp.bfloat16), "lm_head": w(C, V), "blocks": blocks,
            "value_embeds": {str(i): w(V, KV, dtype=jnp.bfloat16) for i in range(L)
                             if cfg.has_value_embed(i)},
            "resid_lambdas": w(L), "x0_lambdas": w(L), "smear_gate": w(SMEAR_CHANNELS, 1),
            "smear_lambda": w(), "backout_lambda": w()}


def make_opt_state(params):
    opt = optax.adamw(1e-3)
    state = opt.init(params)
    grads = jax.tree.map(lambda p: jnp.ones_like(p) * 0.1, params)
    _, state = opt.update(grads, state, params)  # nonzero moments, count=1
    return state


def bits(x):
    """A leaf as raw bytes plus dtype and shape, for bit-exact comparison."""
    x = np.asarray(x)
    return x.dtype, x.shape, x.tobytes()


def assert_trees_bitequal(a, b):
    la, lb = ck._leaves(a), ck._leaves(b)
    assert la.keys() == lb.keys()
    for path in la:
        assert bits(la[path]) == bits(lb[path]), path


def save_simple(d, step, params=None, **kw):
    return ck.save(d, step, make_params() if params is None else params, config=CFG, **kw)


@pytest.fixture(scope="module")
def params():
    return make_params()


def test_round_trip_is_bit_exact(tmp_path, params):
    opt_state = make_opt_state(params)
    loader = {"shard": 3, "offset": np.int64(123456), "epoch": 0, "files": ["a.bin", "b.bin"]}
    tok = {"version": 1, "merges": [[1, 2], [3, 4]], "special": {"<|bos|>": 255}}
    meta = {"loss": np.float32(2.5), "time": 12.25, "git": "abc123"}
    path = ck.save(tmp_path, 7, params, config=CFG, opt_state=opt_state, loader_state=loader,
                   tokenizer=tok, metadata=meta)
    assert path.endswith("/7") and ck.latest_step(tmp_path) == 7

    r = ck.restore(tmp_path, opt_state_like=jax.eval_shape(lambda: opt_state))
    assert r["step"] == 7 and r["config"] == CFG
    assert r["loader_state"] == {**loader, "offset": 123456}
    assert r["tokenizer"] == tok and r["metadata"] == {**meta, "loss": 2.5}
    assert jax.tree.structure(r["params"]) == jax.tree.structure(params)
    assert_trees_bitequal(r["params"], params)
    assert r["params"]["wte"].dtype == jnp.bfloat16 and r["params"]["lm_head"].dtype == jnp.float32
    assert jax.tree.structure(r["opt_state"]) == jax.tree.structure(opt_state)  # optax types back
    assert int(r["opt_state"][0].count) == 1
    assert_trees_bitequal(r["opt_state"], opt_state)

    # without templates: same leaves at the same paths, default-device jax arrays
    r2 = ck.restore(tmp_path, 7)
    assert_trees_bitequal(r2["params"], params)
    assert_trees_bitequal(r2["opt_state"], opt_state)
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(r2["params"]))
    assert ck.restore(tmp_path, load_opt_state=False)["opt_state"] is None


def test_relative_directory_saves_with_optimizer_state(tmp_path, params, monkeypatch):
    """orbax rejects relative paths only when it writes the opt_state item: a run with a relative
    --run-dir died at its first checkpoint, after a whole save interval of training."""
    monkeypatch.chdir(tmp_path)
    path = ck.save("run/checkpoints", 3, params, config=CFG, opt_state=make_opt_state(params))
    assert path == str(tmp_path / "run" / "checkpoints" / "3")
    assert ck.latest_step("run/checkpoints") == 3 and ck.restore("run/checkpoints")["step"] == 3


def test_async_saver_writes_a_step_whose_arrays_were_deleted(tmp_path):
    """The loop donates the state to the next step right after `save` returns: here the arrays
    are deleted at that point, and the step must still be written, complete and bit-exact."""
    params, opt_state = make_params(seed=3), make_opt_state(make_params(seed=3))
    want = jax.tree.map(np.asarray, (params, opt_state))
    with ck.AsyncSaver(tmp_path) as saver:
        saver.save(1, params, config=CFG, opt_state=opt_state, loader_state={"pos": 5})
        for leaf in jax.tree.leaves((params, opt_state)):
            leaf.delete()  # what donating the state does
    r = ck.restore(tmp_path, opt_state_like=jax.eval_shape(lambda: make_opt_state(make_params())))
    assert_trees_bitequal(r["params"], want[0])
    assert_trees_bitequal(r["opt_state"], want[1])
    assert r["loader_state"] == {"pos": 5}


def test_async_saver_keeps_one_save_in_flight_and_the_last_n(tmp_path, params):
    with ck.AsyncSaver(tmp_path, keep=2) as saver:
        for step in (5, 6, 7):
            saver.save(step, params, config=CFG)  # each waits for the one before
    assert ck.all_steps(tmp_path) == [6, 7]  # every step committed, retention as `save`
    with pytest.raises(ck.CheckpointError, match="already holds a complete checkpoint"):
        with ck.AsyncSaver(tmp_path) as saver:
            saver.save(7, params, config=CFG)


def test_optional_items_absent(tmp_path, params):
    save_simple(tmp_path, 0, params)
    r = ck.restore(tmp_path)
    assert r["step"] == 0 and r["opt_state"] is None and r["loader_state"] is None
    assert r["tokenizer"] is None and r["metadata"] is None
    assert ck.load_tokenizer(tmp_path) is None


def test_keeps_last_n(tmp_path, params):
    for step in range(1, 6):
        save_simple(tmp_path, step * 10, params, keep=2)
    assert ck.all_steps(tmp_path) == [40, 50]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["40", "50"]
    save_simple(tmp_path, 60, params, keep=None)
    assert ck.all_steps(tmp_path) == [40, 50, 60]


def test_crash_mid_save_leaves_nothing_complete(tmp_path, params, monkeypatch):
    save_simple(tmp_path, 1, params, metadata={"n": 1})
    original = atomicity.AtomicRenameTemporaryPath.finalize

    async def crash_before_rename(self):
        if self.get_final().name.isdigit():  # the step directory: every item is already committed
            (self.get() / ck.COMMIT_FILE).write_text("about to rename")
            raise RuntimeError("simulated crash")
        return await original(self)

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", crash_before_rename)
    with pytest.raises(RuntimeError, match="simulated crash"):
        save_simple(tmp_path, 2, params, metadata={"n": 2})
    monkeypatch.undo()
    assert not (tmp_path / "2").exists() and (tmp_path / f"2{ck.TMP_SUFFIX}").is_dir()
    with pytest.warns(ck.IncompleteCheckpointWarning, match=r"2\.orbax-checkpoint-tmp"):
        assert ck.latest_step(tmp_path) == 1
    with pytest.warns(ck.IncompleteCheckpointWarning):
        assert ck.restore(tmp_path)["metadata"] == {"n": 1}
    # resuming saves the same step again; orbax replaces the stale temporary directory
    save_simple(tmp_path, 2, params, metadata={"n": 2})
    assert not (tmp_path / f"2{ck.TMP_SUFFIX}").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ck.latest_step(tmp_path) == 2 and ck.restore(tmp_path)["metadata"] == {"n": 2}


def forbid_directory_renames(monkeypatch):
    """A file system that cannot rename a directory, as gcsfuse on an ordinary bucket."""
    import os
    rename = os.rename

    def no_directory_rename(src, dst, *args, **kwargs):
        if os.path.isdir(src):
            raise OSError(95, "Operation not supported", str(src))
        return rename(src, dst, *args, **kwargs)
    monkeypatch.setattr(os, "rename", no_directory_rename)


def test_on_a_mount_without_directory_renames_commit_files_mark_each_step(tmp_path, params, monkeypatch):
    """Where a directory cannot be renamed (gcsfuse), the save renaming its step directory fails;
    in commit-file mode (chosen on FUSE mounts) steps are written in place and committed by
    their commit files, retention works, a crash mid-save leaves a <step> without its commit file
    that readers skip, and saving that step again replaces it."""
    forbid_directory_renames(monkeypatch)
    with pytest.raises(OSError, match="Operation not supported"):
        save_simple(tmp_path / "renaming", 1, params)
    monkeypatch.setenv("NANOCODE_CHECKPOINT_COMMIT_FILE", "1")
    for step in (1, 2, 3):
        save_simple(tmp_path, step, params, metadata={"n": step}, keep=2)
    assert ck.all_steps(tmp_path) == [2, 3] and sorted(p.name for p in tmp_path.iterdir()) == ["2", "3"]
    shutil.copytree(tmp_path / "3", tmp_path / "4")  # a save of step 4 that crashed before committing
    (tmp_path / "4" / ck.COMMIT_FILE).unlink()
    with pytest.warns(ck.IncompleteCheckpointWarning, match=r"/4 \(no commit_success.txt"):
        assert ck.latest_step(tmp_path) == 3
    save_simple(tmp_path, 4, params, metadata={"n": 4}, keep=None)  # the resumed run reaches step 4 again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ck.all_steps(tmp_path) == [2, 3, 4] and ck.restore(tmp_path)["metadata"] == {"n": 4}


def test_fuse_mounts_are_found_by_the_deepest_mount_point():
    mounts = ("/dev/sda1 / ext4 rw 0 0\n"
              "bucket /mnt/shared fuse.gcsfuse rw,nosuid 0 0\n"
              "/dev/sdb1 /mnt/shared/local\\040disk ext4 rw 0 0\n")
    assert ck.on_fuse_mount("/mnt/shared/nanocode/run/checkpoints", mounts)
    assert not ck.on_fuse_mount("/mnt/shared/local disk/run", mounts)
    assert not ck.on_fuse_mount("/mnt/sharedother", mounts) and not ck.on_fuse_mount("/home/x", mounts)


@pytest.mark.parametrize("damage", ["commit_marker", "item_marker", "step_metadata"])
def test_half_written_step_dir_is_ignored(tmp_path, params, damage):
    save_simple(tmp_path, 1, params, metadata={"n": 1})
    shutil.copytree(tmp_path / "1", tmp_path / "9")  # looks like a newer checkpoint...
    {"commit_marker": tmp_path / "9" / ck.COMMIT_FILE,  # ...but is missing a piece
     "item_marker": tmp_path / "9" / "params" / ck.COMMIT_FILE,
     "step_metadata": tmp_path / "9" / ck.STEP_METADATA_FILE}[damage].unlink()
    with pytest.warns(ck.IncompleteCheckpointWarning, match=r"incomplete checkpoint .*/9 "):
        assert ck.latest_step(tmp_path) == 1
    with pytest.warns(ck.IncompleteCheckpointWarning):
        r = ck.restore(tmp_path)
    assert r["step"] == 1 and r["metadata"] == {"n": 1}
    with pytest.raises(ck.CheckpointError, match=r"9 already holds an incomplete checkpoint"):
        save_simple(tmp_path, 9, params)  # won't write over it silently


def test_truncated_latest_falls_back(tmp_path, params):
    save_simple(tmp_path, 1, params, metadata={"n": 1})
    shutil.copytree(tmp_path / "1", tmp_path / "2")
    for f in (tmp_path / "2" / "params").rglob("*"):
        if f.is_file() and f.parent.name == "d":  # array data files
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.warns(ck.IncompleteCheckpointWarning, match="step 2 .* could not be read"):
        r = ck.restore(tmp_path)
    assert r["step"] == 1
    with pytest.raises(ck.CheckpointError, match="step 2 .* could not be read"):
        ck.restore(tmp_path, step=2)


def test_a_step_that_does_not_fit_memory_is_not_called_damaged(tmp_path, params, monkeypatch):
    """A device out of memory while reading (a TPU v5e resuming d20 beside a second copy of its
    state) is not damage: no fall back to an older step, no advice to delete a good checkpoint."""
    save_simple(tmp_path, 1, params)
    save_simple(tmp_path, 2, params)
    before = sorted((p.relative_to(tmp_path), p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
    read = ck._read_step

    def no_room(directory, step, *args, **kw):
        if step == 2:
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure: "
                                             "Error allocating device buffer: 160.00M, 43.16M free")
        return read(directory, step, *args, **kw)

    monkeypatch.setattr(ck, "_read_step", no_room)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ck.IncompleteCheckpointWarning)  # no silent fall back to step 1
        with pytest.raises(ck.CheckpointError, match="step 2 .* intact but did not fit in device memory") as e:
            ck.restore(tmp_path)
    assert "delete" not in str(e.value) and "free the device" in str(e.value)
    assert sorted((p.relative_to(tmp_path), p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file()) == before


def test_load_params_casts_and_skips_opt_state(tmp_path, params):
    save_simple(tmp_path, 3, params, opt_state=make_opt_state(params), tokenizer={"v": 1},
                metadata={"loss": 1.0})
    for f in (tmp_path / "3" / "opt_state").rglob("*"):  # destroy the optimizer state's data
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(b"")
    got, cfg, tok, meta = ck.load_params(tmp_path, dtype=jnp.bfloat16)
    assert cfg == CFG and tok == {"v": 1} and meta == {"loss": 1.0}
    assert {x.dtype for x in jax.tree.leaves(got)} == {jnp.dtype(jnp.bfloat16)}
    want = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    assert_trees_bitequal(got, want)
    got32, *_ = ck.load_params(tmp_path, step=3)
    assert_trees_bitequal(got32, params)
    with pytest.raises(ck.CheckpointError, match="could not be read"):
        ck.restore(tmp_path)  # the full restore does read it


def test_load_tokenizer_imports_lazily(tmp_path, params, monkeypatch):
    class FakeTokenizer:
        @classmethod
        def from_dict(cls, d):
            obj = cls()
            obj.d = d
            return obj

    monkeypatch.setitem(sys.modules, "nanocode.tokenizer",
                        types.SimpleNamespace(Tokenizer=FakeTokenizer))
    tok = FakeTokenizer.from_dict({"vocab": ["a", "b"]})
    tok.to_dict = lambda: {"vocab": ["a", "b"]}
    save_simple(tmp_path, 1, params, tokenizer=tok)
    assert ck.load_tokenizer(tmp_path).d == {"vocab": ["a", "b"]}


def test_missing_dir_and_step_errors(tmp_path, params):
    for d in (tmp_path / "nope", tmp_path):
        with pytest.raises(ck.CheckpointError, match=r"no checkpoint found in .*train base"):
            ck.restore(d)
        assert ck.latest_step(d) is None
    with pytest.raises(ck.CheckpointError, match="no checkpoint found"):
        ck.load_params(tmp_path / "nope")
    save_simple(tmp_path, 5, params)
    save_simple(tmp_path, 10, params)
    with pytest.raises(ck.CheckpointError, match=r"step 7 .*available steps: 5, 10"):
        ck.restore(tmp_path, step=7)
    with pytest.raises(ck.CheckpointError, match="already holds a complete checkpoint"):
        save_simple(tmp_path, 10, params)


def test_template_mismatch_names_the_parameter(tmp_path, params):
    save_simple(tmp_path, 1, params, opt_state=make_opt_state(params))
    like = jax.eval_shape(lambda: params)
    like["blocks"][0]["attn"]["c_q"] = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    with pytest.raises(ck.CheckpointError) as err:
        ck.restore(tmp_path, params_like=like)
    msg = str(err.value)
    assert "blocks/0/attn/c_q: checkpoint has (128, 128) float32, model expects (256, 256)" in msg
    assert "Fix:" in msg and "blocks/1" not in msg

    like = jax.eval_shape(lambda: params)
    like["wte"] = jax.ShapeDtypeStruct(like["wte"].shape, jnp.float32)
    del like["smear_lambda"]
    like["blocks"][0]["attn"]["ve_gate"] = jax.ShapeDtypeStruct((12, 2), jnp.float32)
    with pytest.raises(ck.CheckpointError) as err:
        ck.restore(tmp_path, params_like=like)
    msg = str(err.value)
    assert "wte: checkpoint has (256, 128) bfloat16, model expects (256, 128) float32" in msg
    assert "missing from checkpoint (1): blocks/0/attn/ve_gate" in msg
    assert "in checkpoint but not in model (1): smear_lambda" in msg

    bigger = make_params(preset("cpu-d2", vocab_size=512))
    mismatch = r"(?s)opt_state .*\n  0/mu/lm_head: checkpoint has"
    with pytest.raises(ck.CheckpointError, match=mismatch):
        ck.restore(tmp_path, opt_state_like=jax.eval_shape(lambda: make_opt_state(bigger)))
    save_simple(tmp_path, 2, params)  # no optimizer state saved
    with pytest.raises(ck.CheckpointError, match="no optimizer state"):
        ck.restore(tmp_path, opt_state_like=jax.eval_shape(lambda: make_opt_state(params)))


def test_restore_onto_sharding(tmp_path, params):
    opt_state = make_opt_state(params)
    save_simple(tmp_path, 4, params, opt_state=opt_state)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    P = jax.sharding.PartitionSpec
    rep = jax.sharding.NamedSharding(mesh, P())
    row = jax.sharding.NamedSharding(mesh, P("data", None))

    def template(tree):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=row if x.ndim == 2 else rep),
            tree)

    r = ck.restore(tmp_path, params_like=template(params), opt_state_like=template(opt_state))
    for tree, ref in ((r["params"], params), (r["opt_state"], opt_state)):
        for got, want in zip(jax.tree.leaves(tree), jax.tree.leaves(ref)):
            assert got.sharding == (row if want.ndim == 2 else rep)
        assert_trees_bitequal(tree, ref)
    # a template of concrete arrays donates its own shardings
    placed = jax.device_put(params, rep)
    r = ck.restore(tmp_path, params_like=placed, load_opt_state=False)
    assert all(x.sharding == rep for x in jax.tree.leaves(r["params"]))
