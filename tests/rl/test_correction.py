"""The log-prob gap summary and the truncated importance weights (rollout correction)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.correction import logprob_gap, truncated_is_weights
from coevo_jax.rl.losses import policy_loss
from coevo_jax.rl.train_step import init_policy_state, policy_gradients

from ._tiny import CFG, random_batch, tiny_model

# Two rows: row 0 has 3 tokens, row 1 has 2; position 3 of row 1 is padding whose values
# must not count.
BEH = np.array([[-1.0, -2.0, -0.5, -9.0], [-0.2, -0.4, -7.0, -7.0]], np.float32)
REC = np.array([[-1.1, -1.8, -0.5, 0.0], [-0.5, -0.1, 3.0, 3.0]], np.float32)
MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int32)


def test_gap_hand_case():
    g = {k: float(v) for k, v in logprob_gap(BEH, REC, MASK).items()}
    # d: row 0 = (-0.1, 0.2, 0), row 1 = (-0.3, 0.3)
    assert g["token_abs"] == pytest.approx((0.1 + 0.2 + 0.0 + 0.3 + 0.3) / 5, abs=1e-6)
    s0, s1 = 0.1 / 3, 0.0
    assert g["seq_mean"] == pytest.approx((s0 + s1) / 2, abs=1e-6)
    assert g["seq_absmax"] == pytest.approx(s0, abs=1e-6)
    assert (g["tokens"], g["sequences"]) == (5.0, 2.0)


def test_gap_selects_rows_and_is_zero_on_nothing():
    g = logprob_gap(BEH, REC, MASK, np.array([0.0, 1.0]))
    assert float(g["token_abs"]) == pytest.approx(0.3, abs=1e-6)
    assert float(g["seq_mean"]) == pytest.approx(0.0, abs=1e-6)
    assert float(g["sequences"]) == 1.0
    none = logprob_gap(BEH, REC, MASK, np.zeros(2))
    assert all(float(v) == 0.0 for v in none.values())
    # a negative sequence ratio is the worst one by magnitude
    worst = logprob_gap(BEH, BEH - MASK * 0.5, MASK)
    assert float(worst["seq_absmax"]) == pytest.approx(0.5) and float(worst["seq_mean"]) < 0


def test_gap_is_zero_for_identical_logprobs():
    g = logprob_gap(BEH, BEH, MASK)
    assert float(g["token_abs"]) == 0.0 and float(g["seq_absmax"]) == 0.0


def test_is_weights_hand_case():
    seq = np.asarray(truncated_is_weights(REC, BEH, MASK, cap=2.0))
    assert seq.shape == (2, 1)
    np.testing.assert_allclose(seq[:, 0], [math.exp(0.1 / 3), 1.0], rtol=1e-6)
    tok = np.asarray(truncated_is_weights(REC, BEH, MASK, cap=1.2, level="token"))
    want = np.array(
        [[math.exp(-0.1), 1.2, 1.0, 1.0], [math.exp(-0.3), 1.2, 1.0, 1.0]]
    )  # exp(0.2), exp(0.3) > 1.2 are truncated; padding is 1
    np.testing.assert_allclose(tok, want, rtol=1e-6)
    # the cap binds on a large sequence ratio; a huge one does not overflow
    big = np.asarray(truncated_is_weights(BEH + 5 * MASK, BEH, MASK, cap=3.0))
    assert big.tolist() == [[3.0], [3.0]]
    tiny = np.asarray(truncated_is_weights(BEH - 1e4 * MASK, BEH, MASK, cap=3.0))
    assert np.all(tiny > 0) and np.all(np.isfinite(tiny))


def test_is_weights_carry_no_gradient():
    f = lambda r: truncated_is_weights(r, jnp.asarray(BEH), jnp.asarray(MASK), cap=2.0).sum()
    assert float(jnp.abs(jax.grad(f)(jnp.asarray(REC))).sum()) == 0.0


def test_is_weights_validate():
    with pytest.raises(ValueError, match="level"):
        truncated_is_weights(REC, BEH, MASK, cap=2.0, level="seq")
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(REC, BEH, MASK, cap=0.0)


def test_config_validates_the_correction_keys():
    assert RLConfig().behavior_logprobs == "auto"
    RLConfig(behavior_logprobs="recompute", is_cap=5.0)
    with pytest.raises(ValueError, match="behavior_logprobs"):
        RLConfig(behavior_logprobs="vllm")
    with pytest.raises(ValueError, match="is_cap"):
        RLConfig(is_cap=0.5)


def _inputs(seed, B=6, T=9):
    rng = np.random.default_rng(seed)
    logp = -rng.uniform(0.05, 3.0, (B, T)).astype(np.float32)
    engine = (logp + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    ref = (logp + rng.normal(0, 0.2, (B, T))).astype(np.float32)
    adv = rng.normal(0, 1.0, B).astype(np.float32)
    lengths = np.array([T, 1, 4, T, 7, 2][:B])
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int32)
    return logp, engine, ref, adv, mask


@pytest.mark.oracle
@pytest.mark.parametrize(
    "level,loss_type,beta",
    [("sequence", "grpo", 1e-4), ("token", "dapo", 1e-4), ("token", "grpo", 0.0)],
)
def test_recompute_mode_loss_matches_trl(level, loss_type, beta):
    """The recompute-mode loss (old = stop_gradient(logp), engine log-probs only in the
    weight) against TRL 1.16 with its vLLM importance-sampling correction: TRL's old
    log-probs are the trainer's own (equal to logp for one update per batch) and its ratio
    is the truncated weight, fed in. At the token level the weight is TRL's
    ``token_truncate`` formula; at the sequence level, the geometric-mean weight."""
    pytest.importorskip("torch", reason="TRL oracle needs torch")
    pytest.importorskip("trl", reason="TRL oracle needs trl==1.16.0")
    from ._trl_oracle import trl_loss_and_grad

    kw = dict(eps_low=0.2, eps_high=0.28, beta=beta, level=level, loss_type=loss_type)
    for seed in range(3):
        logp, engine, ref, adv, mask = _inputs(seed)
        cap = 1.1 if level == "sequence" else 1.3
        w = truncated_is_weights(logp, engine, mask, cap=cap, level=level)
        if level == "token":  # TRL's token_truncate: clamp(exp(old - sampling), max=cap)
            np.testing.assert_allclose(
                np.where(mask, np.minimum(np.exp(logp - engine), cap), 1.0), w, rtol=1e-6
            )
        assert 0 < float(jnp.mean(w == cap)) < 1  # the cap binds on some, not all

        def f(lp, w=w, ref=ref, adv=adv, mask=mask):
            return policy_loss(lp, None, ref, adv, mask, is_weights=w, **kw)

        (loss, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
        ref_loss, ref_grad, _ = trl_loss_and_grad(
            logp, logp, ref, adv, mask, importance_sampling_ratio=np.asarray(w), **kw
        )
        np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(np.asarray(grad), ref_grad, rtol=1e-5, atol=1e-8)
        assert float(metrics["ratio"]) == pytest.approx(1.0)
        assert "is_weight" in metrics


def test_weights_scale_each_sequence_loss_not_the_kl():
    logp, engine, ref, adv, mask = _inputs(4)
    w = np.linspace(0.5, 2.0, len(adv)).astype(np.float32)[:, None]
    base = lambda **k: policy_loss(logp, None, ref, adv, mask, beta=0.0, **k)[0]
    # on-policy grpo: loss = -mean_b A_b, so a weight per sequence gives -mean_b w_b A_b
    assert float(base(is_weights=w)) == pytest.approx(-float(np.mean(w[:, 0] * adv)), rel=1e-6)
    # the KL term is not weighted: with A = 0 the loss is the KL alone either way
    kl_only = lambda **k: policy_loss(logp, None, ref, 0 * adv, mask, beta=1.0, **k)[0]
    assert float(kl_only(is_weights=w)) == pytest.approx(float(kl_only()), rel=1e-6)


def test_train_step_recompute_mode_equals_weighted_on_policy_loss():
    """``behavior_logprobs: recompute`` in the multi-agent step gives the gradient of the
    on-policy loss with each sequence weighted by min(exp(mean(logp - engine)), cap); the
    default ``engine`` mode gives a different one (the engine log-probs are its "old")."""
    params, lora = tiny_model()
    batch = random_batch(3, [0, 1, 2, 3, 0, 1, -1, 2], T=6)
    rl = RLConfig(compute_dtype="float32", remat=False, beta=0.0, warmup_steps=0, decay_steps=10)
    rec = dataclasses.replace(rl, behavior_logprobs="recompute", is_cap=1.05)
    state = init_policy_state(lora, rl, jax.random.key(0))
    g_rec, m_rec = policy_gradients(
        state.lora, params, batch, jax.random.key(1), model_cfg=CFG, rl_cfg=rec
    )
    g_eng, _ = policy_gradients(
        state.lora, params, batch, jax.random.key(1), model_cfg=CFG, rl_cfg=rl
    )

    # the same gradient by hand: per-agent grpo losses of the weighted on-policy surrogate
    from coevo_jax.rl.logprobs import sequence_logprobs

    lp0, _ = sequence_logprobs(params, CFG, state.lora, batch, compute_dtype=jnp.float32)
    w = truncated_is_weights(lp0, batch.old_logp, batch.completion_mask, cap=1.05)
    assert 0 < float(jnp.mean(w == 1.05)) < 1

    def loss(p):
        lp, _ = sequence_logprobs(
            params, CFG, state.lora.replace(params=p), batch, compute_dtype=jnp.float32
        )
        total = 0.0
        for a in range(4):
            sel = np.asarray(batch.agent_ids) == a
            total += policy_loss(
                lp[sel],
                None,
                None,
                batch.advantages[sel],
                batch.completion_mask[sel],
                beta=0.0,
                is_weights=w[sel],
            )[0]
        return total

    want = jax.grad(loss)(state.lora.params)
    leaves = (jax.tree.leaves(g_rec), jax.tree.leaves(want), jax.tree.leaves(g_eng))
    for got, exp_, eng in zip(*leaves, strict=True):
        np.testing.assert_allclose(got, exp_, rtol=2e-4, atol=1e-6)
        assert not np.allclose(eng, exp_, rtol=1e-2, atol=1e-5)
    np.testing.assert_allclose(m_rec["ratio"], 1.0, rtol=1e-5)
    assert np.all(m_rec["is_weight"] <= 1.05 + 1e-6)
    # g_eng came from the default, "auto": a step given it directly (no engine to resolve it
    # against) is the engine choice
    assert rl.behavior_logprobs == "auto"
    eng = dataclasses.replace(rl, behavior_logprobs="engine")
    g_eng2, _ = policy_gradients(
        state.lora, params, batch, jax.random.key(1), model_cfg=CFG, rl_cfg=eng
    )
    for a_, e_ in zip(jax.tree.leaves(g_eng), jax.tree.leaves(g_eng2), strict=True):
        np.testing.assert_array_equal(a_, e_)
