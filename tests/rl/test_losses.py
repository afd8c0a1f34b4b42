"""GSPO/GRPO/DAPO losses against TRL 1.16 ``GRPOTrainer._compute_loss`` (value and gradient)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.rl.losses import k3_kl, policy_loss, policy_loss_terms, reduce_terms


def _inputs(seed, B=6, T=9):
    rng = np.random.default_rng(seed)
    logp = -rng.uniform(0.05, 3.0, (B, T)).astype(np.float32)
    # Large enough perturbations that both clip sides are exercised.
    old = (logp + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    ref = (logp + rng.normal(0, 0.2, (B, T))).astype(np.float32)
    adv = rng.normal(0, 1.0, B).astype(np.float32)
    lengths = np.array([T, 1, 4, T, 7, 2][:B])  # full and short rows
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int32)
    return logp, old, ref, adv, mask


def _ours(logp, old, ref, adv, mask, **kw):
    def f(lp):
        return policy_loss(
            lp, jnp.asarray(old), jnp.asarray(ref), jnp.asarray(adv), jnp.asarray(mask), **kw
        )

    (loss, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
    return float(loss), np.asarray(grad, np.float64), {k: float(v) for k, v in metrics.items()}


CASES = list(
    itertools.product(("sequence", "token"), ("grpo", "dapo"), (0.0, 1e-4), (0.2, 0.28))
) + [("sequence", "dr_grpo", 1e-4, 0.28), ("token", "dr_grpo", 0.0, 0.2)]


@pytest.mark.oracle
@pytest.mark.parametrize("level,loss_type,beta,eps_high", CASES)
def test_matches_trl_value_and_grad(level, loss_type, beta, eps_high):
    pytest.importorskip("torch", reason="TRL oracle needs torch")
    pytest.importorskip("trl", reason="TRL oracle needs trl==1.16.0")
    from ._trl_oracle import trl_loss_and_grad

    kw = dict(eps_low=0.2, eps_high=eps_high, beta=beta, level=level, loss_type=loss_type)
    for seed in range(3):
        x = _inputs(seed)
        ref_loss, ref_grad, ref_metrics = trl_loss_and_grad(*x, **kw)
        loss, grad, metrics = _ours(*x, **kw)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-8)
        for ours, theirs in [
            ("clip_low", "clip_ratio/low_mean"),
            ("clip_high", "clip_ratio/high_mean"),
            ("clip_region", "clip_ratio/region_mean"),
        ] + ([("kl", "kl")] if beta else []):
            np.testing.assert_allclose(metrics[ours], ref_metrics[theirs], rtol=1e-5, atol=1e-7)


@pytest.mark.oracle
def test_clipping_is_exercised_by_the_oracle_inputs():
    logp, old, ref, adv, mask = _inputs(0)
    _, _, m = _ours(logp, old, ref, adv, mask, level="token", loss_type="dapo", beta=0.0)
    assert m["clip_low"] > 0 and m["clip_high"] > 0


def test_on_policy_ratio_is_one_and_gradient_is_advantage_weighted():
    logp, _, _, adv, mask = _inputs(1)
    f = lambda lp: policy_loss(lp, None, None, jnp.asarray(adv), jnp.asarray(mask), beta=0.0)
    (loss, metrics), g = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
    np.testing.assert_allclose(float(metrics["ratio"]), 1.0, rtol=1e-6)
    # grpo/sequence on-policy: loss = -mean_b A_b; dL/dlogp_bt = -A_b m_bt / (B n_b).
    n = mask.sum(-1, keepdims=True)
    np.testing.assert_allclose(float(loss), -adv.mean(), rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(g), -adv[:, None] * mask / (len(adv) * n), rtol=1e-5, atol=1e-8
    )


def test_terms_split_across_halves_reduce_exactly():
    """Numerator/denominator kept apart: two halves summed equal the whole batch."""
    logp, old, ref, adv, mask = _inputs(2)
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        kw = dict(loss_type=loss_type, level="token", beta=1e-4)
        whole, _ = policy_loss(logp, old, ref, adv, mask, **kw)
        a = policy_loss_terms(logp[:3], old[:3], ref[:3], adv[:3], mask[:3], **kw)
        b = policy_loss_terms(logp[3:], old[3:], ref[3:], adv[3:], mask[3:], **kw)
        joined = (a.numer.sum() + b.numer.sum()) / (a.denom.sum() + b.denom.sum())
        np.testing.assert_allclose(float(joined), float(whole), rtol=1e-6)


def test_weights_select_a_subset():
    logp, old, ref, adv, mask = _inputs(3)
    terms = policy_loss_terms(logp, old, ref, adv, mask, loss_type="dapo")
    w = np.array([1, 0, 1, 0, 0, 1], np.float32)
    loss, _ = reduce_terms(terms, jnp.asarray(w))
    sel = w.astype(bool)
    sub, _ = policy_loss(logp[sel], old[sel], ref[sel], adv[sel], mask[sel], loss_type="dapo")
    np.testing.assert_allclose(float(loss), float(sub), rtol=1e-6)


def test_empty_rows_are_finite_and_entropy_metric():
    logp, old, ref, adv, mask = _inputs(4)
    mask[1] = 0
    ent = np.full_like(logp, 2.0)
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        loss, m = policy_loss(
            logp, old, ref, adv, mask, loss_type=loss_type, entropy=jnp.asarray(ent)
        )
        assert np.isfinite(float(loss))
        np.testing.assert_allclose(float(m["entropy"]), 2.0, rtol=1e-6)


def test_k3_is_nonnegative_and_zero_at_equality():
    x = jnp.linspace(-3, 0, 7)
    assert float(jnp.abs(k3_kl(x, x)).max()) == 0.0
    assert float(k3_kl(x, x[::-1]).min()) >= 0.0


def test_bad_arguments_raise():
    logp, old, ref, adv, mask = _inputs(5)
    with pytest.raises(ValueError, match="level"):
        policy_loss(logp, old, ref, adv, mask, level="tokens")
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logp, old, ref, adv, mask, loss_type="ppo")
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, old, None, adv, mask, beta=0.1)
