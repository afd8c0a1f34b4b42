import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.router.config import RouterConfig
from coevo_jax.router.state import init_router
from coevo_jax.router.step import (
    record_entropy,
    route,
    router_step,
    update_counters,
)

from ._synthetic import DIM, TwoClusters, evaluate, train

SMALL = RouterConfig(n_agents=2, hidden=32, out_dim=16)


def _d(state, h):
    return np.asarray(state.head.scores(h, state.cfg)[1]["d"])


def _agent_params(state, i):
    return [np.asarray(x)[i] for x in jax.tree.leaves(state.params)]


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _near_targets(state, noise=0.05, seed=0):
    """Predictors = targets + noise, so d starts well below the margin."""
    leaves = {name: state.frozen[f"target_{name}"][...] for name in ("w1", "b1", "w2", "b2")}
    key = jax.random.key(seed)
    params = state.params
    for name, value in leaves.items():
        key, sub = jax.random.split(key)
        params[name][...] = value + noise * jax.random.normal(sub, value.shape)
    return state.replace(params=params)


def test_positive_advantage_pulls_and_only_that_agent_moves():
    st = init_router(SMALL, DIM)
    h = jax.random.normal(jax.random.key(0), (1, DIM))
    active = jnp.array([[True, False]])  # solo activation: A = rbar = 1
    new, metrics = router_step(st, h, jnp.array([[1.0, 0.0]]), active)
    assert _d(new, h)[0, 0] < _d(st, h)[0, 0]
    assert _same(_agent_params(new, 1), _agent_params(st, 1))
    assert not _same(_agent_params(new, 0), _agent_params(st, 0))
    jax.tree.map(np.testing.assert_array_equal, st.frozen, new.frozen)
    assert int(new.step) == 1 and float(metrics["grad_norm"]) > 0


def test_negative_advantage_pushes_while_inside_margin():
    st = _near_targets(init_router(SMALL, DIM))
    h = jax.random.normal(jax.random.key(1), (1, DIM))
    d0 = _d(st, h)[0]
    assert (d0 < SMALL.margin).all()
    active = jnp.array([[True, True]])
    new, _ = router_step(st, h, jnp.array([[0.0, 1.0]]), active)  # A = (-0.5, +0.5)
    d1 = _d(new, h)[0]
    assert d1[0] > d0[0]  # pushed away
    assert d1[1] < d0[1]  # pulled in
    jax.tree.map(np.testing.assert_array_equal, st.frozen, new.frozen)


def test_negative_advantage_beyond_margin_leaves_head_unchanged():
    st = init_router(SMALL, DIM)
    h = jax.random.normal(jax.random.key(2), (1, DIM))
    assert _d(st, h)[0, 0] >= SMALL.margin  # random heads start near d = sqrt(2)
    active = jnp.array([[True, True]])
    new, _ = router_step(st, h, jnp.array([[0.0, 1.0]]), active)
    assert _same(_agent_params(new, 0), _agent_params(st, 0))
    assert not _same(_agent_params(new, 1), _agent_params(st, 1))
    # The "no margin" ablation keeps pushing.
    unbounded = init_router(dataclasses.replace(SMALL, unbounded_push=True), DIM)
    new_u, _ = router_step(unbounded, h, jnp.array([[0.0, 1.0]]), active)
    assert _d(new_u, h)[0, 0] > _d(unbounded, h)[0, 0]


def test_counters_and_exploration_bonus():
    cfg = dataclasses.replace(SMALL, c_ucb=2.0, w_ent=0.0)
    st = init_router(cfg, DIM)
    active = jnp.array([[True, False], [True, False], [True, True]])
    st = update_counters(st, active, valid=jnp.array([True, True, False]))
    assert int(st.counters.T) == 2
    np.testing.assert_array_equal(np.asarray(st.counters.n), [2, 0])
    st = update_counters(st, active)
    assert int(st.counters.T) == 5
    np.testing.assert_array_equal(np.asarray(st.counters.n), [5, 1])
    # The less-used agent gets the larger UCB bonus; inference drops it.
    h = jax.random.normal(jax.random.key(3), (4, DIM))
    train_dec = route(st, h, train=True)
    inf_dec = route(st, h, train=False)
    bonus = np.asarray(train_dec.s - train_dec.f)
    np.testing.assert_allclose(bonus[0], 2.0 * np.log(5) / (np.array([5, 1]) + 1), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(inf_dec.s), np.asarray(inf_dec.f))


def test_record_entropy_is_token_weighted_history_mean():
    st = init_router(SMALL, DIM)
    st = record_entropy(st, jnp.array([1.0, 5.0]), jnp.array([10.0, 0.0]))
    st = record_entropy(st, jnp.array([4.0, 2.0]), jnp.array([30.0, 4.0]))
    np.testing.assert_allclose(np.asarray(st.counters.h_bar), [(10 + 120) / 40, 2.0], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(st.counters.entropy_tokens), [40.0, 4.0])


def test_top_k_routing_switch():
    st = init_router(dataclasses.replace(SMALL, n_agents=3, routing="top_k", top_k=2), DIM)
    dec = route(st, jax.random.normal(jax.random.key(4), (5, DIM)), train=False)
    np.testing.assert_array_equal(np.asarray(dec.active).sum(1), 2)


def test_step_rejects_mismatched_shapes():
    st = init_router(SMALL, DIM)
    with pytest.raises(AssertionError):
        router_step(st, jnp.ones((3, DIM)), jnp.ones((2, 2)), jnp.ones((2, 2), bool))


def test_learns_two_clusters_and_routes_to_specialists():
    # lr 1e-3 instead of the paper's 1e-4 keeps this test to a few seconds.
    cfg = RouterConfig(n_agents=2, hidden=64, out_dim=32, lr=1e-3, c_ucb=0.2, w_ent=0.0)
    task = TwoClusters(seed=0)
    st = init_router(cfg, DIM)
    before = evaluate(st, task)
    assert before["mean_active"] == 2.0  # untrained: nobody is familiar, fallback to all
    st, _ = train(st, task, steps=1200)
    after = evaluate(st, task)
    assert after["f_A"][0] > after["f_A"][1] + 0.3
    assert after["f_B"][1] > after["f_B"][0] + 0.3
    assert after["argmax_correct"] > 0.95
    assert after["own_agent_active"] > 0.95
    assert after["solo_own_agent"] > 0.5  # most queries go to their agent alone
