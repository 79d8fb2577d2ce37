"""The optimizer: Polar Express, the Muon update's norms and cautious decay, AdamW against optax,
the schedules and batch/wd formulas, group labels, and a tiny GPT that learns a fixed batch."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nanocode.config import GPTConfig, param_counts, preset
from nanocode.gpt import init_params, loss_fn
from train.optim import (POLAR_EXPRESS_COEFFS, adamw, auto_total_batch, build_optimizer,
                         lr_multiplier, muon, muon_momentum, muon_wd, muon_weight_decay,
                         param_groups, peak_lrs, polar_express)

# The 5 Polar Express quintics are a minimax fit of sign(x) on [~1e-3, 1]: composing them maps any
# singular value in [1e-3, 1] (after the /(1.01 ||X||_F) normalisation) into [0.8589, 1.1411]
# (checked on a dense grid below). A random Gaussian 64x256 has sigma_min / ||X||_F ~ 0.06, far
# inside that, so f32 output singular values must lie in it; bf16 rounding widens it a little.
PE_BOUNDS = {jnp.float32: (0.85, 1.15), jnp.bfloat16: (0.80, 1.17)}


def test_polar_express_scalar_map_bounds():
    x = np.geomspace(1e-3, 1.0, 100_001)
    for a, b, c in POLAR_EXPRESS_COEFFS:
        x = a * x + b * x**3 + c * x**5
    assert 0.858 < x.min() and x.max() < 1.142


@pytest.mark.parametrize("shape", [(64, 256), (256, 64)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_polar_express_semi_orthogonal(shape, dtype):
    g = jax.random.normal(jax.random.PRNGKey(0), shape)
    x = polar_express(g, 5, dtype)
    assert x.shape == shape and x.dtype == jnp.float32
    sv = np.linalg.svd(np.asarray(x), compute_uv=False)
    lo, hi = PE_BOUNDS[dtype]
    assert lo < sv.min() and sv.max() < hi, (sv.min(), sv.max())
    # same singular directions as g: X ~ U V^T, so <X, g> = sum_i sigma_i(g) sigma_i(X) ~ nuclear
    nuclear = np.linalg.svd(np.asarray(g), compute_uv=False).sum()
    assert float(jnp.sum(x * g)) > 0.85 * nuclear


@jax.jit
def _muon_step(param, grad, lr=1.0, wd=0.0, momentum=0.0):
    """One Muon step from a fresh state with constant (traced) schedules."""
    tx = muon(lr, momentum, wd, ns_dtype=jnp.float32)
    delta, state = tx.update({"w": grad}, tx.init({"w": param}), {"w": param})
    return delta["w"], state


@pytest.mark.parametrize("shape,factor", [((16, 64), 2.0), ((64, 16), 1.0), ((32, 32), 1.0),
                                          ((16, 24), math.sqrt(1.5))])
def test_muon_update_norm_and_shape_lr(shape, factor):
    """Kernels are (in, out); c_fc is (C, 4C) -> torch (4C, C), m/n = 4, lr x2. Renormalisation and
    NorMuon fix ||update||_F = sqrt(min(m, n)) whatever the gradient's scale."""
    kp, kg = jax.random.split(jax.random.PRNGKey(1))
    param = jax.random.normal(kp, shape)
    for scale in (1e-4, 1.0, 1e3):
        delta, _ = _muon_step(param, scale * jax.random.normal(kg, shape), lr=0.5)
        expected = 0.5 * factor * math.sqrt(min(shape))
        np.testing.assert_allclose(float(jnp.linalg.norm(delta)), expected, rtol=1e-4)


def test_muon_zero_grad_is_finite():
    """Output projections start at zero, so the first grads of c_q/c_fc are exactly zero."""
    delta, state = _muon_step(jnp.ones((8, 16)), jnp.zeros((8, 16)), wd=0.0)
    assert bool(jnp.all(delta == 0)) and all(bool(jnp.all(jnp.isfinite(x)))
                                             for x in jax.tree.leaves(state))


def test_cautious_weight_decay_masks_by_sign():
    kp, kg = jax.random.split(jax.random.PRNGKey(2))
    param = jax.random.normal(kp, (48, 32))  # torch (32, 48): lr factor 1
    grad = jax.random.normal(kg, (48, 32))
    lr, wd = 0.1, 0.3
    plain, _ = _muon_step(param, grad, lr=lr, wd=0.0)
    decayed, _ = _muon_step(param, grad, lr=lr, wd=wd)
    direction = -plain / lr  # the orthogonalised g of the spec
    same_sign = direction * param >= 0
    assert 0.2 < float(same_sign.mean()) < 0.8  # both cases are exercised
    expected = jnp.where(same_sign, -lr * wd * param, 0.0)
    np.testing.assert_allclose(np.asarray(decayed - plain), np.asarray(expected), atol=1e-6)


def test_muon_stacked_equals_per_leaf():
    keys = jax.random.split(jax.random.PRNGKey(4), 6)
    params = {"a": jax.random.normal(keys[0], (16, 8)), "b": jax.random.normal(keys[1], (16, 8)),
              "c": jax.random.normal(keys[2], (8, 32))}
    grads = {k: jax.random.normal(kk, v.shape) for (k, v), kk in zip(params.items(), keys[3:])}
    results = []
    for stack in (True, False):
        tx = muon(0.1, 0.9, 0.2, ns_dtype=jnp.float32, stack=stack)
        state = tx.init(params)
        for _ in range(2):
            delta, state = jax.jit(tx.update)(grads, state, params)
        results.append((delta, state))
    for a, b in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_muon_nesterov_momentum():
    """Second step with momentum 0.5: buf = 0.5*buf + 0.5*g, g_nesterov = 0.5*g + 0.5*buf."""
    tx = muon(1.0, 0.5, 0.0, ns_dtype=jnp.float32)
    p = {"w": jnp.ones((4, 6))}
    g1, g2 = jnp.full((4, 6), 2.0), jnp.arange(24.0).reshape(4, 6)
    state, update = tx.init(p), jax.jit(tx.update)
    _, state = update({"w": g1}, state, p)
    np.testing.assert_allclose(state.mu["w"], 0.5 * g1)
    _, state = update({"w": g2}, state, p)
    np.testing.assert_allclose(state.mu["w"], 0.25 * g1 + 0.5 * g2)
    assert int(state.count) == 2
    # NorMuon state along the shorter side (nanochat's red_dim), in (out, in) orientation:
    assert state.nu["w"].shape == (6, 1)  # (in 4, out 6) kernel = tall (6, 4) update: per row
    assert tx.init({"w": jnp.ones((6, 4))}).nu["w"].shape == (1, 6)  # wide (4, 6): per column


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_adamw_matches_optax(dtype):
    keys = jax.random.split(jax.random.PRNGKey(3), 6)
    params = {"a": jax.random.normal(keys[0], (8, 5)).astype(dtype), "b": jnp.ones((3,), dtype)}
    sched = lambda step: 0.01 * lr_multiplier(step, 5, warmup_steps=2)
    mine = adamw(sched, 0.8, 0.96, 1e-10, 0.01)
    ref = optax.adamw(sched, b1=0.8, b2=0.96, eps=1e-10, weight_decay=0.01,
                      mu_dtype=jnp.float32)
    p1, p2 = params, params
    s1, s2 = mine.init(p1), ref.init(p2)
    mine_update, ref_update = jax.jit(mine.update), jax.jit(ref.update)
    for i in range(5):
        g = jax.tree.map(lambda x, k: jax.random.normal(k, x.shape).astype(dtype), params,
                         {"a": keys[1 + i % 5], "b": keys[(2 + i) % 6]})
        u1, s1 = mine_update(g, s1, p1)
        u2, s2 = ref_update(g, s2, p2)
        p1, p2 = optax.apply_updates(p1, u1), optax.apply_updates(p2, u2)
        if dtype == jnp.float32:
            for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
                np.testing.assert_allclose(a, b, atol=1e-6)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves((s1.mu, s1.nu)))
    assert all(x.dtype == dtype for x in jax.tree.leaves(p1))


def test_schedules():
    N = 1000  # warmdown = 650 steps, starting at step 350
    assert float(lr_multiplier(0, N)) == pytest.approx(1 / 40)
    assert float(lr_multiplier(39, N)) == pytest.approx(1.0)
    assert float(lr_multiplier(200, N)) == pytest.approx(1.0)
    assert float(lr_multiplier(350, N)) == pytest.approx(1.0)
    assert float(lr_multiplier(675, N)) == pytest.approx(0.5 + 0.5 * 0.05)
    assert float(lr_multiplier(N, N)) == pytest.approx(0.05)
    assert float(muon_momentum(0, N)) == pytest.approx(0.85)
    assert float(muon_momentum(200, N)) == pytest.approx(0.91)
    assert float(muon_momentum(400, N)) == pytest.approx(0.97 + (0.90 - 0.97) * 50 / 650)
    assert float(muon_momentum(400, 10_000)) == pytest.approx(0.97)
    assert float(muon_momentum(N, N)) == pytest.approx(0.90)
    assert float(muon_weight_decay(0, N, 0.2)) == pytest.approx(0.2)
    assert float(muon_weight_decay(500, N, 0.2)) == pytest.approx(0.1)
    assert float(muon_weight_decay(250, N, 0.2)) == pytest.approx(0.1 * (1 + math.cos(math.pi / 4)))
    assert float(muon_weight_decay(N, N, 0.2)) == pytest.approx(0.0, abs=1e-7)
    # traced steps give the same numbers
    steps = jnp.array([0, 200, 675, N])
    np.testing.assert_allclose(jax.jit(lambda s: lr_multiplier(s, N))(steps),
                               [1 / 40, 1.0, 0.525, 0.05], rtol=1e-6)


def test_auto_batch_and_wd():
    assert auto_total_batch(preset("d12"), 12) == 2**19
    d24 = param_counts(preset("d24"))["scaling"] / param_counts(preset("d12"))["scaling"]  # ~6.63
    assert round(math.log2(2**19 * d24**0.383)) == 20  # log2 = 20.05
    assert auto_total_batch(preset("d24"), 12) == 2**20
    assert muon_wd(preset("d12"), 2**19, 12) == pytest.approx(0.28)
    assert muon_wd(preset("d24"), 2**20, 12) == pytest.approx(0.28 * math.sqrt(2) / d24)
    lrs = peak_lrs(preset("d24"), 2**20)  # C = 1536
    assert lrs["wte"] == pytest.approx(0.3 * math.sqrt(0.5) * math.sqrt(2))
    assert lrs["matrix"] == pytest.approx(0.02 * math.sqrt(2))
    assert lrs["x0"] == pytest.approx(0.5 * math.sqrt(2)) and lrs["smear"] == 0.2


TINY = dict(n_layer=2, n_embd=64, n_head=2, n_kv_head=2, head_dim=32, vocab_size=128,
            sequence_len=32)


@pytest.mark.parametrize("features", [True, False])
def test_param_groups_cover_every_leaf(features):
    switches = {} if features else dict(value_embeds=False, window_pattern="L", lambdas=False,
                                        smear=False, backout=False)
    for cfg in (GPTConfig(**TINY, **switches), preset("d12", **switches)):
        params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
        labels = param_groups(params)
        assert jax.tree.structure(labels) == jax.tree.structure(params)
        flat = jax.tree_util.tree_leaves_with_path(labels)
        got = {}
        for path, label in flat:
            got.setdefault(label, []).append(jax.tree_util.keystr(path))
        expected = {"matrix", "lm_head", "wte"}
        if features:
            expected |= {"value_embeds", "resid", "x0", "smear"}
            assert any("ve_gate" in p for p in got["matrix"])
            assert len(got["smear"]) == 3
        assert set(got) == expected
        assert len(got["matrix"]) == cfg.n_layer * 6 + sum(map(cfg.has_value_embed,
                                                               range(cfg.n_layer)))
    with pytest.raises(ValueError):
        param_groups({"mystery": jnp.zeros(3)})


def test_build_optimizer_lm_head_matches_optax_adamw():
    cfg = GPTConfig(**TINY)
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params = {"lm_head": 0.1 * jax.random.normal(k1, (64, 128)),  # any subtree works: skip Muon
              "wte": jax.random.normal(k2, (128, 64))}
    tx = build_optimizer(cfg, params, total_steps=100, batch_tokens=2**17)
    peak = 0.008 * (64 / 768) ** -0.5 * 0.5
    ref = optax.adamw(lambda s: peak * lr_multiplier(s, 100), b1=0.8, b2=0.96, eps=1e-10,
                      weight_decay=0.01)
    grads = jax.tree.map(lambda p: jnp.full(p.shape, 0.1, p.dtype), params)
    s1, s2 = tx.init(params), ref.init(params["lm_head"])
    update1, update2 = jax.jit(tx.update), jax.jit(ref.update)
    for _ in range(3):
        u1, s1 = update1(grads, s1, params)
        u2, s2 = update2(grads["lm_head"], s2, params["lm_head"])
        np.testing.assert_allclose(u1["lm_head"], u2, rtol=1e-5, atol=1e-9)


def test_tiny_gpt_learns_fixed_batch():
    cfg = GPTConfig(**TINY)
    params = init_params(cfg, jax.random.PRNGKey(0))
    idx = jax.random.randint(jax.random.PRNGKey(1), (4, 33), 0, cfg.vocab_size)
    x, y = idx[:, :-1], idx[:, 1:]
    # At B = 2^19 the tuned lrs (wte 0.3*sqrt(12) at C=64) are too hot for a 2-layer toy on one
    # memorised batch; 2^15 (lrs / 4) learns smoothly: 4.85 -> ~0.23 in 30 steps.
    steps = 30
    tx = build_optimizer(cfg, params, total_steps=steps, batch_tokens=2**15, warmup_steps=3)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(params, cfg, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(steps):
        params, opt_state, loss = train_step(params, opt_state)
        losses.append(float(loss))
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.2 * losses[0], losses


def test_scaled_lrs_multiplies_the_named_groups_and_refuses_nonpositive():
    from train.optim import OptimConfig, scaled_lrs

    oc = OptimConfig()
    over = scaled_lrs(6.0, ["matrix", "wte"])
    assert over == {"matrix_lr": 6.0 * oc.matrix_lr, "wte_lr": 6.0 * oc.wte_lr}
    assert "smear_lr" in scaled_lrs(2.0)
    with pytest.raises(ValueError, match="scale must be > 0"):
        scaled_lrs(0.0)
