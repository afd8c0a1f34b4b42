"""The rollout/trainer log-prob gap: measured, and corrected by truncated importance sampling.

A rollout engine (vLLM, or the in-process sampler) reports the *behaviour* log-prob of each
sampled token; the trainer recomputes the same tokens under the same adapter with its own
kernels. Different kernels, dtypes and batching make the two disagree a little (the vLLM bf16
CPU build against the fp32 trainer: about 0.04 nats/token), and a serving bug makes them
disagree a lot. Two pure pieces here:

- :func:`logprob_gap` measures the disagreement;
- :func:`truncated_is_weights` turns it into the truncated importance weight that lets the
  trainer's recompute stand in for GSPO's "old" log-probs while the engine's log-probs only
  reweight each sequence (``RLConfig.behavior_logprobs = "recompute"``).

Notation, per row ``b`` and completion position ``t`` with mask ``m``: ``d_bt = r_bt - e_bt``
(``r`` the recomputed/target log-prob, ``e`` the engine's), ``n_b = sum_t m_bt``.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from coevo_jax.rl.config import LEVELS


def logprob_gap(
    behaviour_logp: jax.Array,
    recomputed_logp: jax.Array,
    mask: jax.Array,
    weights: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """Summary of ``d = recomputed - behaviour`` over the selected rows' counted tokens.

    Args:
      behaviour_logp: ``[B, T]`` float log-probs the engine returned for the sampled tokens.
      recomputed_logp: ``[B, T]`` float log-probs of the same tokens under the trainer (same
        adapter, same temperature).
      mask: ``[B, T]`` 1 on completion tokens, 0 on padding (any dtype).
      weights: optional ``[B]`` 0/1 selection of rows (e.g. one agent's); default all.

    Returns:
      float32 scalars:

      - ``token_abs``: mean ``|d_bt|`` per token, ``sum_bt m |d| / sum_bt m`` (nats/token);
      - ``seq_mean``: mean over sequences of GSPO's sequence log-ratio
        ``s_b = sum_t m_bt d_bt / max(n_b, 1)``, i.e. ``log`` of the length-normalised
        sequence ratio ``(pi_trainer(y_b) / pi_engine(y_b)) ** (1 / n_b)``; signed, so it
        shows a bias (> 0: the trainer finds the samples likelier than the engine did);
      - ``seq_absmax``: ``max_b |s_b|``, the worst sequence;
      - ``tokens``, ``sequences``: how many tokens and sequences (rows with ``n_b > 0``)
        were summarised.

      All zero when nothing is selected.
    """
    chex.assert_rank(behaviour_logp, 2)
    chex.assert_equal_shape([behaviour_logp, recomputed_logp, mask])
    m = mask.astype(jnp.float32)
    if weights is not None:
        chex.assert_shape(weights, behaviour_logp.shape[:1])
        m = m * weights.astype(jnp.float32)[:, None]
    d = (recomputed_logp.astype(jnp.float32) - behaviour_logp.astype(jnp.float32)) * m
    n = m.sum(-1)
    rows = (n > 0).astype(jnp.float32)
    s = d.sum(-1) / jnp.maximum(n, 1.0)
    return {
        "token_abs": jnp.abs(d).sum() / jnp.maximum(n.sum(), 1.0),
        "seq_mean": (s * rows).sum() / jnp.maximum(rows.sum(), 1.0),
        "seq_absmax": jnp.max(jnp.abs(s) * rows, initial=0.0),
        "tokens": n.sum(),
        "sequences": rows.sum(),
    }


def truncated_is_weights(
    target_logp: jax.Array,
    behaviour_logp: jax.Array,
    mask: jax.Array,
    *,
    cap: float,
    level: str = "sequence",
) -> jax.Array:
    """Truncated importance weights ``min(pi_target / pi_engine, cap)``, stop-gradient.

    This is the rollout correction of verl ("Rollout Correction", decoupled mode with
    truncated IS, ``rollout_is`` / ``rollout_is_threshold``: docs/algo/rollout_corr.md,
    https://verl.readthedocs.io/en/latest/algo/rollout_corr.html) and of TRL's GRPOTrainer
    (``vllm_importance_sampling_correction`` with ``vllm_importance_sampling_mode`` =
    ``token_truncate`` / ``sequence_truncate`` and ``vllm_importance_sampling_cap`` /
    ``vllm_importance_sampling_clip_max``: https://huggingface.co/docs/trl/grpo_trainer).
    The target is the trainer's own recompute (verl's ``pi_old``); PPO/GSPO's clipped ratio
    is then taken against that recompute, and the engine's log-probs enter only here.

    Levels:

    - ``"sequence"`` (GSPO): ``w_b = min(exp(s_b), cap)`` with the *length-normalised*
      ``s_b = sum_t m_bt (target - behaviour) / max(n_b, 1)``, the same unit as GSPO's
      sequence ratio. With it the uncorrected GSPO ratio ``(pi_theta / pi_engine)^(1/n)``
      factors exactly into the clipped ``(pi_theta / pi_old)^(1/n)`` times this weight.
      verl's and TRL's sequence modes instead use the plain product of token ratios (the
      unnormalised sum); over hundreds of tokens a per-token noise of a few hundredths of a
      nat makes that product span orders of magnitude, so almost every weight would sit at
      the cap or near 0, which is why the geometric mean is used here.
    - ``"token"``: ``w_bt = min(exp(target_bt - behaviour_bt), cap)`` (TRL's
      ``token_truncate``, verl's ``rollout_is: token``).

    Args:
      target_logp: ``[B, T]`` log-probs under the trainer's policy (any gradient is cut).
      behaviour_logp: ``[B, T]`` log-probs the engine returned.
      mask: ``[B, T]`` 1 on counted completion tokens.
      cap: upper truncation, > 0 (verl's typical 2.0).
      level: ``"sequence"`` or ``"token"``.

    Returns:
      float32 ``[B, 1]`` (sequence) or ``[B, T]`` (token) weights in ``(0, cap]``, without
      gradient; 1 for rows or positions with no counted token. The exponent is clamped to
      ``[-20, 20]`` (as verl's safety bound) so that a wild engine value cannot overflow.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    chex.assert_rank(target_logp, 2)
    chex.assert_equal_shape([target_logp, behaviour_logp, mask])
    m = mask.astype(jnp.float32)
    d = (
        jax.lax.stop_gradient(target_logp).astype(jnp.float32)
        - jax.lax.stop_gradient(behaviour_logp).astype(jnp.float32)
    ) * m
    if level == "sequence":
        d = (d.sum(-1) / jnp.maximum(m.sum(-1), 1.0))[:, None]
    return jnp.minimum(jnp.exp(jnp.clip(d, -20.0, 20.0)), cap)
