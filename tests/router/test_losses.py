import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.router.losses import push_pull_loss, router_advantages


def test_router_advantages_mean_over_active_and_solo():
    rbar = jnp.array([[1.0, 0.5, 0.0, 9.0], [0.25, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
    active = jnp.array(
        [[True, True, True, False], [True, False, False, False], [False, False, False, False]]
    )
    adv = np.asarray(router_advantages(rbar, active))
    np.testing.assert_allclose(adv[0], [0.5, 0.0, -0.5, 0.0])  # inactive reward ignored
    np.testing.assert_allclose(adv[1], [0.25, 0.0, 0.0, 0.0])  # solo: A = rbar
    np.testing.assert_allclose(adv[2], 0.0)


def test_push_pull_values():
    d = jnp.array([[0.2, 0.4, 1.5, 0.9]])
    adv = jnp.array([[0.5, -1.0, -1.0, 2.0]])
    active = jnp.array([[True, True, True, False]])
    # 0.5*0.2 + 1*(1-0.4) + 1*max(0, 1-1.5) over 3 active pairs.
    np.testing.assert_allclose(push_pull_loss(d, adv, active, margin=1.0), (0.1 + 0.6 + 0.0) / 3)
    # No margin: A * d for every sign.
    np.testing.assert_allclose(
        push_pull_loss(d, adv, active, margin=None), (0.1 - 0.4 - 1.5) / 3, rtol=1e-6
    )
    # No active pair: 0, not nan.
    assert float(push_pull_loss(d, adv, jnp.zeros_like(active))) == 0.0


def test_push_pull_gradient_signs_and_margin_cutoff():
    d = jnp.array([[0.3, 0.3, 1.2, 0.3]])
    adv = jnp.array([[1.0, -1.0, -1.0, 0.0]])
    active = jnp.ones_like(d, bool)
    g = np.asarray(jax.grad(lambda x: push_pull_loss(x, adv, active))(d))[0]
    assert g[0] > 0  # descending lowers d (pull)
    assert g[1] < 0  # descending raises d (push) while d < m
    assert g[2] == 0  # beyond the margin: no push
    assert g[3] == 0
    # Advantages are constants.
    ga = jax.grad(lambda a: push_pull_loss(d, a, active))(adv)
    np.testing.assert_array_equal(np.asarray(ga), 0.0)
