import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coevo_jax.router.routing import activate, routing_scores, select_agents, select_top_k

GRID = 64  # f and tau on a 1/64 grid: every partial sum is exact in float32


def ranking(s_row):
    return sorted(range(len(s_row)), key=lambda i: (-s_row[i], i))


@st.composite
def routing_case(draw):
    n = draw(st.integers(1, 6))
    b = draw(st.integers(1, 4))
    f = draw(
        st.lists(st.lists(st.integers(0, GRID), min_size=n, max_size=n), min_size=b, max_size=b)
    )
    # Few distinct s values so ties are common.
    s = draw(st.lists(st.lists(st.integers(-3, 3), min_size=n, max_size=n), min_size=b, max_size=b))
    tau = draw(st.integers(1, 2 * GRID))
    return np.array(f, np.float32) / GRID, np.array(s, np.float32) / 2, tau / GRID


@settings(max_examples=300, deadline=None)
@given(routing_case())
def test_select_agents_properties(case):
    f, s, tau = case
    active = np.asarray(select_agents(jnp.asarray(f), jnp.asarray(s), tau=tau))
    assert active.dtype == bool and active.shape == f.shape
    for fr, sr, ar in zip(f, s, active, strict=True):
        order = ranking(sr.tolist())
        ranked = ar[order]
        k = int(ranked.sum())
        assert k >= 1
        # A prefix of the s-order (ties to the lower agent index).
        assert ranked[:k].all() and not ranked[k:].any()
        chosen = fr[order[:k]]
        if fr.sum() < tau:
            assert k == len(fr)  # fallback: everyone
        else:
            assert chosen.sum() >= tau  # reaches tau
            assert chosen[:-1].sum() < tau  # minimal: dropping the last member falls short


@settings(max_examples=100, deadline=None)
@given(routing_case())
def test_inference_mode_orders_by_f(case):
    f, _, tau = case
    n = f.shape[1]
    s = routing_scores(
        jnp.asarray(f), T=100, n=jnp.arange(n), h_bar=jnp.ones(n), c_ucb=0.0, w_ent=0.0
    )
    np.testing.assert_array_equal(np.asarray(s), f)
    active = np.asarray(select_agents(jnp.asarray(f), s, tau=tau))
    for fr, ar in zip(f, active, strict=True):
        # Every activated agent is at least as familiar as every non-activated one.
        if (~ar).any():
            assert fr[ar].min() >= fr[~ar].max()


def test_select_agents_examples():
    f = jnp.array([[0.5, 0.1, 0.3, 0.2], [0.1, 0.1, 0.1, 0.1]])
    # Row 0: s ranks 3, 2, 0, 1 -> cumulative f 0.2, 0.5, 1.0 >= 0.7 -> {3, 2, 0}.
    s = jnp.array([[0.6, 0.0, 0.7, 0.9], [0.0, 0.0, 0.0, 0.0]])
    active = np.asarray(select_agents(f, s, tau=0.7))
    np.testing.assert_array_equal(active[0], [True, False, True, True])
    np.testing.assert_array_equal(active[1], [True, True, True, True])  # 0.4 < 0.7: all
    # "Reaches" means >= tau: exactly tau stops.
    exact = select_agents(jnp.array([[0.5, 0.25, 0.25]]), jnp.array([[3.0, 2.0, 1.0]]), tau=0.75)
    np.testing.assert_array_equal(np.asarray(exact)[0], [True, True, False])


def test_select_top_k_ties_to_lower_index():
    s = jnp.array([[1.0, 2.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(
        np.asarray(select_top_k(s, 2)), [[False, True, True, False], [True, True, False, False]]
    )
    np.testing.assert_array_equal(np.asarray(select_top_k(s, 1)).sum(-1), [1, 1])
    with pytest.raises(ValueError):
        select_top_k(s, 5)


def test_routing_scores_formula_and_t_guard():
    f = jnp.array([[0.1, 0.2, 0.3]])
    n = jnp.array([0, 3, 9])
    h_bar = jnp.array([0.5, 1.0, 0.0])
    s = routing_scores(f, T=10, n=n, h_bar=h_bar, c_ucb=2.0, w_ent=0.5)
    want = (
        np.array([0.1, 0.2, 0.3])
        + 2.0 * np.log(10) / (np.array([0, 3, 9]) + 1)
        + 0.5 * np.array([0.5, 1.0, 0.0])
    )
    np.testing.assert_allclose(np.asarray(s)[0], want, rtol=1e-6)
    for t in (0, 1):  # log(T) guarded: no bonus, no -inf/nan before anything was routed
        s0 = routing_scores(f, T=t, n=n, h_bar=jnp.zeros(3), c_ucb=2.0, w_ent=0.0)
        np.testing.assert_allclose(np.asarray(s0), np.asarray(f))


def test_activate_is_each_rule_and_excludes_agents_out_of_budget():
    f = jnp.asarray([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.6, 0.2]])
    s = f + jnp.asarray([0.0, 0.4, 0.0, 0.0])  # an exploration bonus for agent 1
    np.testing.assert_array_equal(activate(f, s, tau=0.7), select_agents(f, s, tau=0.7))
    np.testing.assert_array_equal(activate(f, tau=0.7), select_agents(f, f, tau=0.7))
    np.testing.assert_array_equal(activate(f, s, routing="top_k", top_k=2), select_top_k(s, 2))
    out = np.asarray([False, True, False, False])
    got = np.asarray(activate(f, s, tau=0.7, excluded=out))
    assert not got[:, 1].any()
    # without agent 1 the threshold is met by the others, ranked by s as before
    np.testing.assert_array_equal(got, [[True, False, True, False], [False, False, True, True]])
    top = np.asarray(activate(f, s, routing="top_k", top_k=4, excluded=out))
    np.testing.assert_array_equal(top.sum(axis=1), [3, 3])  # k shrinks to the agents left
    with pytest.raises(ValueError, match="routing must be"):
        activate(f, routing="bogus")
