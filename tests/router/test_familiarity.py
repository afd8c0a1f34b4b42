import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from coevo_jax.router.familiarity import (
    FamiliarityHeads,
    FrozenTarget,
    familiarity,
    orthogonal_across_agents,
)


def test_familiarity_matches_formula():
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(3, 4, 8)).astype(np.float32)
    target = rng.normal(size=(3, 4, 8)).astype(np.float32)
    f, d = familiarity(jnp.asarray(pred), jnp.asarray(target), lam=2.0)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    want_d = np.linalg.norm(unit(pred) - unit(target), axis=-1)
    np.testing.assert_allclose(np.asarray(d), want_d, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(f), np.exp(-2.0 * want_d), rtol=1e-5)
    assert f.shape == d.shape == (3, 4)


def test_familiarity_scale_invariant_bounded_and_safe_at_zero():
    x = jnp.array([[[1.0, 2.0, 3.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    y = jnp.array([[[2.0, 4.0, 6.0], [-3.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    f, d = familiarity(x, y, lam=2.0)
    np.testing.assert_allclose(np.asarray(d)[0, :2], [0.0, 2.0], atol=1e-6)
    np.testing.assert_allclose(np.asarray(f)[0, 0], 1.0)
    g = jax.grad(lambda p: familiarity(p, y)[1].sum())(x)
    assert np.isfinite(np.asarray(g)).all()  # same direction and zero vector: finite grads


def _gram(w):
    return np.einsum("nih,mik->nmhk", w, w)


def test_targets_mutually_orthogonal_when_dims_allow():
    w = np.asarray(orthogonal_across_agents(jax.random.key(0), 3, in_dim=48, out_dim=16))
    g = _gram(w)
    for i in range(3):
        for j in range(3):
            want = np.eye(16) if i == j else np.zeros((16, 16))
            np.testing.assert_allclose(g[i, j], want, atol=1e-5)


def test_targets_tight_frame_when_dims_too_small():
    w = np.asarray(orthogonal_across_agents(jax.random.key(0), 4, in_dim=24, out_dim=16))
    frame = np.einsum("nih,njh->ij", w, w)  # sum_i W_i W_i^T
    np.testing.assert_allclose(frame, np.eye(24), atol=1e-5)
    assert np.abs(_gram(w)[0, 1]).max() > 1e-3  # overlap is unavoidable here


def test_heads_shapes_and_target_second_layer_orthonormal():
    heads = FamiliarityHeads(3, 20, hidden=12, out=5, rngs=nnx.Rngs(0))
    pred, target = heads.project(jnp.ones((7, 20)))
    assert pred.shape == target.shape == (7, 3, 5)
    f, d = heads(jnp.ones((7, 20)))
    assert f.shape == d.shape == (7, 3)
    w2 = np.asarray(heads.target_w2[...])
    for i in range(3):
        np.testing.assert_allclose(w2[i].T @ w2[i], np.eye(5), atol=1e-5)


def test_targets_excluded_from_optimizer_by_construction():
    heads = FamiliarityHeads(2, 6, hidden=8, out=4, rngs=nnx.Rngs(1))
    params = nnx.state(heads, nnx.Param)
    names = {str(path[0]) for path, _ in nnx.to_flat_state(params)}
    assert names == {"w1", "b1", "w2", "b2"}
    assert not issubclass(FrozenTarget, nnx.Param)
    before = jax.tree.map(jnp.copy, nnx.state(heads, FrozenTarget))
    opt = nnx.Optimizer(heads, optax.sgd(10.0), wrt=nnx.Param)
    h = jax.random.normal(jax.random.key(2), (5, 6))

    def loss(m):
        return m(h)[1].sum()

    grads = nnx.grad(loss)(heads)
    opt.update(heads, grads)
    after = nnx.state(heads, FrozenTarget)
    jax.tree.map(np.testing.assert_array_equal, before, after)
    # Even a gradient taken w.r.t. everything leaves the target branch at zero.
    all_grads = nnx.grad(loss, argnums=nnx.DiffState(0, ...))(heads)
    tw = nnx.state(all_grads, FrozenTarget)
    for leaf in jax.tree.leaves(tw):
        np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_input_width_checked():
    heads = FamiliarityHeads(2, 6, hidden=8, out=4, rngs=nnx.Rngs(1))
    with pytest.raises(AssertionError):
        heads(jnp.ones((3, 7)))
