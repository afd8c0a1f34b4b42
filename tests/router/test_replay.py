"""The router's replay window (``router.replay_rounds``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.router import (
    RouterConfig,
    RouterReplay,
    init_router,
    push_round,
    rewindow,
    router_step,
)


def _round(seed, b=3, d=5, n=2):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.normal(size=(b, d)), jnp.float32),
        jnp.asarray(rng.uniform(size=(b, n)), jnp.float32),
        jnp.asarray(rng.uniform(size=(b, n)) < 0.6),
    )


def test_the_window_keeps_the_last_rounds_and_overwrites_the_oldest():
    w = RouterReplay.empty(2, 3, 5, 2)
    rounds = [_round(s) for s in range(3)]
    for r in rounds:
        w = push_round(w, *r)
    assert int(w.rounds) == 3
    # slot 0 held round 0 until round 2 replaced it; slot 1 holds round 1
    for slot, (h, rbar, served) in ((0, rounds[2]), (1, rounds[1])):
        np.testing.assert_array_equal(np.asarray(w.h[slot]), np.asarray(h))
        np.testing.assert_array_equal(np.asarray(w.served[slot]), np.asarray(served))
        np.testing.assert_array_equal(
            np.asarray(w.rbar[slot]), np.where(np.asarray(served), np.asarray(rbar), 0.0)
        )
    h, rbar, served = w.flat()
    assert h.shape == (6, 5) and rbar.shape == served.shape == (6, 2)


def test_a_step_on_a_part_filled_window_is_the_step_on_its_rows():
    # empty slots serve nobody, so they must change neither the loss nor the update
    cfg = RouterConfig(n_agents=2, hidden=8, out_dim=4, c_ucb=0.0, w_ent=0.0)
    state = init_router(cfg, 5, seed=0)
    h, rbar, served = _round(0)
    w = push_round(RouterReplay.empty(4, 3, 5, 2), h, rbar, served)
    got, gm = router_step(state, *w.flat())
    want, wm = router_step(state, h, rbar, served)
    np.testing.assert_allclose(float(gm["loss"]), float(wm["loss"]), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("new", [1, 2, 3, 5])
def test_rewindow_keeps_the_most_recent_rounds_oldest_first(new):
    rounds = [_round(s) for s in range(5)]
    w = RouterReplay.empty(3, 3, 5, 2)
    for r in rounds:  # slots now hold rounds 3, 4, 2
        w = push_round(w, *r)
    got = rewindow(w, new)
    want = RouterReplay.empty(new, 3, 5, 2)
    for r in rounds[-min(new, 3) :]:
        want = push_round(want, *r)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_shapes_are_checked():
    w = RouterReplay.empty(2, 3, 5, 2)
    h, rbar, served = _round(0, b=4)
    with pytest.raises(AssertionError):
        push_round(w, h, rbar, served)
    with pytest.raises(ValueError, match="rounds and batch"):
        RouterReplay.empty(0, 3, 5, 2)


@pytest.mark.parametrize("field", ["update_steps", "replay_rounds"])
def test_config_refuses_a_schedule_below_one(field):
    with pytest.raises(ValueError, match=f"{field} must be >= 1, got 0"):
        RouterConfig(**{field: 0})
