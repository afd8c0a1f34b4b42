"""Clipped policy-gradient losses: GSPO (sequence ratio) and GRPO/DAPO (token ratio).

The loss is split in two layers so that gradient accumulation and per-agent losses are exact:

- :func:`policy_loss_terms` returns, per sequence, a loss *numerator* and a *denominator*
  contribution. Every aggregation (``grpo``, ``dapo``, ``dr_grpo``) is
  ``sum(numerator) / sum(denominator)`` over whatever set of sequences forms one loss: a
  batch, one agent's sequences, or micro-batches accumulated together. Summing the two
  apart (as tunix does) makes accumulated gradients equal the full-batch gradient even when
  micro-batches hold different token counts.
- :func:`policy_loss` is the plain ``(loss, metrics)`` form for one batch, checked against
  TRL 1.16 ``GRPOTrainer._compute_loss`` (value and gradient w.r.t. ``logp``).

Conventions (TRL 1.16's, pinned): k3 KL ``exp(ref - logp) - (ref - logp) - 1`` added per
token before aggregation; GSPO's sequence log-ratio is the masked token mean of
``logp - old_logp`` and is *not* stop-gradiented, so gradients flow through the mean; the
``dapo`` denominator is the token count of the sequences forming the loss; ``dr_grpo``'s is
``sequences x max_completion_length``.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from coevo_jax.rl.config import LEVELS, LOSS_TYPES

# Metric name -> which per-sequence count it is averaged over.
_RATIO_METRICS = ("clip_low", "clip_high", "clip_region", "ratio")
_TOKEN_METRICS = ("kl", "entropy")
# ``is_weight``: the mean truncated importance weight (``coevo_jax.rl.correction``), per
# sequence or per token as the weights come.


class LossTerms(NamedTuple):
    """Per-sequence pieces of a policy loss; reduce with :func:`reduce_terms`.

    Attributes:
      numer: ``[B]`` float32 loss numerator of each sequence (differentiable).
      denom: ``[B]`` float32 denominator contribution of each sequence (data only).
      sums: ``{name: [B]}`` per-sequence metric sums (no gradient).
      counts: ``{name: [B]}`` per-sequence counts the metric sums are averaged over.
    """

    numer: jax.Array
    denom: jax.Array
    sums: dict[str, jax.Array]
    counts: dict[str, jax.Array]


def k3_kl(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """Per-token k3 estimator of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def policy_loss_terms(
    logp: jax.Array,
    old_logp: jax.Array | None,
    ref_logp: jax.Array | None,
    advantages: jax.Array,
    mask: jax.Array,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 1e-4,
    level: str = "sequence",
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    entropy: jax.Array | None = None,
    is_weights: jax.Array | None = None,
) -> LossTerms:
    """Per-sequence numerators/denominators of the clipped surrogate plus ``beta`` x k3 KL.

    Args:
      logp: ``[B, T]`` float log-probs of the completion tokens under the current policy;
        the argument gradients are taken with respect to.
      old_logp: ``[B, T]`` behaviour-policy log-probs; None means on-policy
        (``stop_gradient(logp)``, ratio 1 with the right gradient).
      ref_logp: ``[B, T]`` reference log-probs (adapter off); needed when ``beta > 0``.
      advantages: ``[B]`` one advantage per sequence.
      mask: ``[B, T]`` 1 on completion tokens that count, 0 on padding (any dtype).
      eps_low, eps_high: clip range ``[1 - eps_low, 1 + eps_high]``.
      beta: KL weight; 0 drops the KL term (``ref_logp`` may then be None).
      level: ``"sequence"`` (GSPO) or ``"token"``.
      loss_type: ``"grpo"``, ``"dapo"`` or ``"dr_grpo"`` (see module docstring).
      max_completion_length: ``dr_grpo``'s per-sequence denominator; default T.
      entropy: optional ``[B, T]`` per-token entropies, reported as a metric only.
      is_weights: optional ``[B, 1]`` (per sequence) or ``[B, T]`` (per token) importance
        weights, treated as constants, multiplying the clipped surrogate of each sequence
        (not the KL term), as TRL applies its vLLM importance-sampling ratio; see
        ``coevo_jax.rl.correction.truncated_is_weights``. Reported as ``is_weight``.

    Returns:
      :class:`LossTerms` with float32 ``[B]`` leaves. Only ``numer`` depends on ``logp``.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if beta != 0.0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (the adapter-off log-probs)")
    chex.assert_rank(logp, 2)
    chex.assert_equal_shape([logp, mask])
    chex.assert_shape(advantages, logp.shape[:1])
    logp = logp.astype(jnp.float32)
    old_logp = jax.lax.stop_gradient(logp) if old_logp is None else old_logp.astype(jnp.float32)
    chex.assert_equal_shape([logp, old_logp])
    m = mask.astype(jnp.float32)
    adv = advantages.astype(jnp.float32)[:, None]
    n_tok = m.sum(-1)
    n_tok_safe = jnp.maximum(n_tok, 1.0)

    log_ratio = logp - old_logp
    if level == "sequence":
        log_w = ((log_ratio * m).sum(-1) / n_tok_safe)[:, None]  # [B, 1]
    else:
        log_w = log_ratio  # [B, T]
    ratio = jnp.exp(log_w)
    clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    tok_loss = -jnp.minimum(ratio * adv, clipped * adv)
    if is_weights is not None:
        if is_weights.shape not in ((logp.shape[0], 1), logp.shape):
            raise ValueError(f"is_weights must be [B, 1] or [B, T], got {is_weights.shape}")
        is_weights = jax.lax.stop_gradient(is_weights.astype(jnp.float32))
        tok_loss = tok_loss * is_weights
    tok_loss = jnp.broadcast_to(tok_loss, logp.shape)

    kl = None
    if ref_logp is not None:
        chex.assert_equal_shape([logp, ref_logp])
        kl = k3_kl(logp, ref_logp.astype(jnp.float32))
    if beta != 0.0:
        tok_loss = tok_loss + beta * kl

    summed = (tok_loss * m).sum(-1)
    if loss_type == "grpo":
        numer, denom = summed / n_tok_safe, jnp.ones_like(summed)
    elif loss_type == "dapo":
        numer, denom = summed, n_tok
    else:
        t_max = logp.shape[1] if max_completion_length is None else max_completion_length
        numer, denom = summed, jnp.full_like(summed, float(t_max))

    # Metrics, TRL's definitions: a sequence-level ratio counts once per sequence.
    sg = jax.lax.stop_gradient
    r = sg(ratio)
    low = ((r < 1.0 - eps_low) & (adv < 0)).astype(jnp.float32)
    high = ((r > 1.0 + eps_high) & (adv > 0)).astype(jnp.float32)
    if level == "sequence":
        red = lambda x: jnp.broadcast_to(x, (logp.shape[0], 1))[:, 0]
        ratio_count = jnp.ones_like(n_tok)
    else:
        red = lambda x: (jnp.broadcast_to(x, logp.shape) * m).sum(-1)
        ratio_count = n_tok
    sums = {
        "clip_low": red(low),
        "clip_high": red(high),
        "clip_region": red(jnp.maximum(low, high)),
        "ratio": red(r),
    }
    counts = {k: ratio_count for k in _RATIO_METRICS}
    if kl is not None:
        sums["kl"] = (sg(kl) * m).sum(-1)
        counts["kl"] = n_tok
    if entropy is not None:
        chex.assert_equal_shape([logp, entropy])
        sums["entropy"] = (sg(entropy).astype(jnp.float32) * m).sum(-1)
        counts["entropy"] = n_tok
    if is_weights is not None:
        if is_weights.shape[1] == 1:
            sums["is_weight"], counts["is_weight"] = is_weights[:, 0], jnp.ones_like(n_tok)
        else:
            sums["is_weight"], counts["is_weight"] = (is_weights * m).sum(-1), n_tok
    return LossTerms(numer=numer, denom=sg(denom), sums=sums, counts=counts)


def reduce_terms(
    terms: LossTerms, weights: jax.Array | None = None
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``sum(w * numer) / max(sum(w * denom), 1)`` and the matching metric means.

    Args:
      terms: per-sequence terms from :func:`policy_loss_terms`.
      weights: optional ``[B]`` 0/1 selection of the sequences forming this loss (e.g. one
        agent's); default all.

    Returns:
      ``(loss, metrics)``: scalar float32 loss, and ``{name: scalar}`` metric means
      (``clip_low``, ``clip_high``, ``clip_region``, ``ratio``, and ``kl``/``entropy`` when
      available).
    """
    w = jnp.ones_like(terms.numer) if weights is None else weights.astype(jnp.float32)
    loss = (w * terms.numer).sum() / jnp.maximum((w * terms.denom).sum(), 1.0)
    metrics = {
        k: (w * terms.sums[k]).sum() / jnp.maximum((w * terms.counts[k]).sum(), 1.0)
        for k in terms.sums
    }
    return loss, metrics


def policy_loss(
    logp: jax.Array,
    old_logp: jax.Array | None,
    ref_logp: jax.Array | None,
    advantages: jax.Array,
    mask: jax.Array,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 1e-4,
    level: str = "sequence",
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    entropy: jax.Array | None = None,
    is_weights: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped policy loss with a per-token k3 KL penalty, for one batch.

    ``level="sequence"`` is GSPO: ``log_rho_b = sum_t m (logp - old_logp) / max(1, sum_t m)``,
    ``rho_b = exp(log_rho_b)``; per-token loss ``-min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)
    + beta * kl_t``. ``level="token"`` uses each token's own ratio. Aggregation by
    ``loss_type``: ``grpo`` = per-sequence token mean then mean over sequences; ``dapo`` =
    token sum / total tokens; ``dr_grpo`` = token sum / (B * max_completion_length).

    Args: as :func:`policy_loss_terms` (``logp``, ``old_logp``, ``ref_logp``, ``mask``,
      ``entropy``: ``[B, T]``; ``advantages``: ``[B]``; ``is_weights``: ``[B, 1]`` or
      ``[B, T]``).

    Returns:
      ``(loss, metrics)``: scalar float32 loss, differentiable w.r.t. ``logp``; metrics are
      scalar means: ``clip_low``/``clip_high``/``clip_region`` (fraction of ratios clipped on
      the side that binds for the advantage's sign), ``ratio``, ``kl`` (when ``ref_logp`` is
      given), ``entropy`` (when given), ``is_weight`` (when ``is_weights`` is given).
    """
    terms = policy_loss_terms(
        logp,
        old_logp,
        ref_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        beta=beta,
        level=level,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        entropy=entropy,
        is_weights=is_weights,
    )
    return reduce_terms(terms)
