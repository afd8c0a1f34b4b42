import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from coevo_jax.router.config import RouterConfig
from coevo_jax.router.familiarity import FrozenTarget
from coevo_jax.router.state import RouterCounters, RouterState, init_router, with_feature_stats
from coevo_jax.router.step import route, router_loss


def test_init_splits_trainable_from_frozen():
    cfg = RouterConfig(n_agents=3, hidden=16, out_dim=8)
    st = init_router(cfg, 12)
    assert isinstance(st, RouterState)
    param_types = {type(v) for _, v in nnx.to_flat_state(st.params)}
    frozen_types = {type(v) for _, v in nnx.to_flat_state(st.frozen)}
    assert param_types == {nnx.Param} and frozen_types == {FrozenTarget}
    # Adam moments exist for the predictor leaves only.
    n_param = len(jax.tree.leaves(st.params))
    moments = [x for x in jax.tree.leaves(st.opt_state) if np.ndim(x) > 0]
    assert len(moments) == 2 * n_param
    c = st.counters
    assert isinstance(c, RouterCounters) and int(c.T) == 0 and c.n.shape == (3,)


def test_state_is_a_pytree_and_deterministic_from_seed():
    cfg = RouterConfig(n_agents=2, hidden=16, out_dim=8)
    a, b = init_router(cfg, 12), init_router(cfg, 12)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    c = init_router(cfg, 12, seed=7)
    assert not np.array_equal(np.asarray(a.params["w1"][...]), np.asarray(c.params["w1"][...]))
    leaves, treedef = jax.tree.flatten(a)
    back = jax.tree.unflatten(treedef, leaves)
    assert back.cfg == cfg and back.graphdef == a.graphdef


def test_fresh_state_feeds_the_heads_raw_features():
    st = init_router(RouterConfig(n_agents=2, hidden=16, out_dim=8), 12)
    h = jax.random.normal(jax.random.key(0), (5, 12)) * 300.0
    np.testing.assert_array_equal(np.asarray(st.head_input(h)), np.asarray(h))


def test_feature_stats_are_set_only_when_the_config_asks():
    h = jax.random.normal(jax.random.key(1), (40, 12)) * 3.0 + 50.0
    raw = init_router(RouterConfig(n_agents=2, hidden=16, out_dim=8), 12)
    assert with_feature_stats(raw, h) is raw
    cfg = RouterConfig(n_agents=2, hidden=16, out_dim=8, feature_norm="standardize")
    st = with_feature_stats(init_router(cfg, 12), h)
    z = np.asarray(st.head_input(h))
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(z.std(0), 1.0, atol=1e-4)
    # the statistics are state leaves: they travel with a checkpoint's flat array list
    leaves = jax.tree.leaves(st)
    assert any(x is st.feature_shift for x in leaves)
    assert any(x is st.feature_scale for x in leaves)


def test_routing_on_whitened_state_equals_routing_on_whitened_features():
    cfg = RouterConfig(n_agents=3, hidden=16, out_dim=8, feature_norm="standardize")
    h = jax.random.normal(jax.random.key(2), (30, 12)) * 7.0 - 20.0
    st = with_feature_stats(init_router(cfg, 12), h)
    plain = init_router(cfg, 12)  # same seed: same heads, identity whitening
    mean, std = np.asarray(h).mean(0), np.asarray(h).std(0)
    got = route(st, h, train=False)
    want = route(plain, (h - mean) / std, train=False)
    np.testing.assert_allclose(np.asarray(got.f), np.asarray(want.f), rtol=1e-4, atol=1e-6)
    # and the loss the router step differentiates sees the same inputs
    rbar = jnp.ones((30, 3))
    a = router_loss(st.params, st, h, rbar, got.active)[0]
    b = router_loss(plain.params, plain, (h - mean) / std, rbar, got.active)[0]
    np.testing.assert_allclose(float(a), float(b), rtol=1e-4)
