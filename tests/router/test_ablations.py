import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from coevo_jax.router.ablations import (
    best_agent_targets,
    classification_loss,
    regression_loss,
)
from coevo_jax.router.config import RouterConfig
from coevo_jax.router.state import feature_dim, init_router

from ._synthetic import DIM, TwoClusters, evaluate, train


def test_regression_loss_is_mse_over_active_pairs():
    pred = jnp.array([[0.5, 0.0], [1.0, 2.0]])
    rbar = jnp.array([[1.0, 7.0], [0.0, 0.0]])
    active = jnp.array([[True, False], [True, True]])
    np.testing.assert_allclose(regression_loss(pred, rbar, active), (0.25 + 1.0 + 4.0) / 3)


def test_best_agent_targets_and_classification_loss():
    rbar = jnp.array([[0.2, 0.8, 0.8], [0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [0.3, 0.0, 0.0]])
    active = jnp.array(
        [[True, True, True], [True, True, False], [True, True, True], [True, False, False]]
    )
    target, valid = best_agent_targets(rbar, active)
    np.testing.assert_array_equal(np.asarray(target)[[0, 3]], [1, 0])  # tie -> lower index
    np.testing.assert_array_equal(np.asarray(valid), [True, False, False, True])
    logits = jnp.array([[0.0, 1.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 9.0], [2.0, 0.0, 0.0]])
    want = (
        optax.softmax_cross_entropy_with_integer_labels(logits[0], 1)
        + optax.softmax_cross_entropy_with_integer_labels(logits[3], 0)
    ) / 2
    np.testing.assert_allclose(classification_loss(logits, rbar, active), want, rtol=1e-6)


@pytest.mark.parametrize("head", ["regression", "classification"])
def test_ablation_heads_learn_two_clusters(head):
    cfg = RouterConfig(n_agents=2, hidden=64, head=head, lr=1e-3, c_ucb=0.2, w_ent=0.0)
    task = TwoClusters(seed=1)
    st = init_router(cfg, DIM)
    st, metrics = train(st, task, steps=300)
    assert np.isfinite(float(metrics["loss"]))
    out = evaluate(st, task)
    assert out["f_A"][0] > out["f_A"][1] and out["f_B"][1] > out["f_B"][0]
    assert out["argmax_correct"] > 0.9
    # Frozen part is empty for these heads: everything trainable is a Param.
    assert not jax.tree.leaves(st.frozen)


def test_final_layer_ablation_trains_on_final_width():
    cfg = RouterConfig(n_agents=2, hidden=32, out_dim=16, feature_layers="final", lr=1e-3)
    assert feature_dim(DIM, "final") == DIM and feature_dim(DIM, "mid") == 2 * DIM
    st = init_router(cfg, feature_dim(DIM, cfg.feature_layers))
    st, metrics = train(st, TwoClusters(seed=2), steps=20)
    assert np.isfinite(float(metrics["loss"])) and int(st.step) == 20
    with pytest.raises(ValueError):
        feature_dim(DIM, "last")
    # Same interface for every head: route and step work unchanged.
    assert dataclasses.replace(cfg, head="familiarity").head == "familiarity"
