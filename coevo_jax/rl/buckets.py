"""Completion-length buckets: the policy step skips the padded tail of each micro-batch.

A :class:`~coevo_jax.rl.logprobs.PolicyBatch` is padded to one completion width ``T`` (the
generation budget), but rollouts stop early: most of a batch's completion columns can be
padding, and padding rows (agent id -1) fill whole row buckets. Both cost a full forward
and backward. Shapes under ``jit`` are static, so the step cannot trim to each batch's
lengths without recompiling; instead it compiles the micro-batch body for a few widths
``0 < w_1 < ... < w_K = T`` and picks one per micro-batch at run time (``lax.switch``),
after sorting the rows by length so that short rows share micro-batches. Width 0 (every
row padding) skips the micro-batch outright.

Trimming is exact: attention is causal, so the tokens past a micro-batch's longest
completion never influence the ones before it, and every loss term and denominator is a
per-sequence sum (``coevo_jax.rl.losses``) that ignores masked positions.

Written by hand: no library buckets a jitted step's work by a data-dependent length.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def bucket_widths(t: int, k: int) -> tuple[int, ...]:
    """``(0, ceil(T / K), ceil(2T / K), ..., T)``, duplicates removed.

    Args:
      t: the padded completion width ``T`` (>= 1).
      k: number of nonzero widths ``K`` (>= 1).

    Returns:
      Strictly increasing widths starting at 0 and ending at ``t``.
    """
    if t < 1 or k < 1:
        raise ValueError(f"bucket_widths needs T >= 1 and K >= 1, got T={t}, K={k}")
    return tuple(sorted({0, *(-(-j * t // k) for j in range(1, k + 1))}))


def chooses_width(widths: tuple[int, ...]) -> bool:
    """Whether the step picks a width per micro-batch from ``widths`` (:func:`bucket_widths`).

    Only with two or more nonzero widths. With one (``K = 1``, or ``T`` too narrow to split)
    every micro-batch runs at the full width, including all-padding ones, and the rows keep
    their order.
    """
    return len(widths) > 2


def needed_lengths(completion_mask: jax.Array, agent_ids: jax.Array) -> jax.Array:
    """Columns each row needs: one past its last counted completion token.

    Args:
      completion_mask: ``[B, T]`` (any dtype), nonzero on tokens that count in the loss.
      agent_ids: ``[B]`` int; rows with a negative id are padding and need 0.

    Returns:
      ``[B]`` int32 in ``[0, T]``. Not differentiable (data only). An agent's row needs at
      least 1 even with no counted token: its sequence-level metrics (ratio, clip
      fractions) count it once, so its micro-batch must run.
    """
    chex.assert_rank(completion_mask, 2)
    chex.assert_shape(agent_ids, completion_mask.shape[:1])
    cols = jnp.arange(1, completion_mask.shape[1] + 1, dtype=jnp.int32)
    last = jnp.max(jnp.where(completion_mask > 0, cols[None], 0), axis=-1)
    return jnp.where(agent_ids >= 0, jnp.maximum(last, 1), 0).astype(jnp.int32)


def longest_first(lengths: jax.Array) -> jax.Array:
    """``[B]`` int32 row order, longest first (stable: equal lengths keep their order).

    Consecutive micro-batches of the reordered batch then hold rows of similar length,
    and padding rows (length 0) come last.
    """
    chex.assert_rank(lengths, 1)
    return jnp.argsort(-lengths, stable=True).astype(jnp.int32)


def bucket_index(need: jax.Array, widths: tuple[int, ...]) -> jax.Array:
    """Index of the narrowest width in ``widths`` that is ``>= need``, elementwise.

    Args:
      need: int array (any shape), columns needed (``<= widths[-1]``).
      widths: increasing static widths from :func:`bucket_widths`.

    Returns:
      int32, ``need``'s shape.
    """
    return jnp.searchsorted(jnp.asarray(widths, jnp.int32), need, side="left").astype(jnp.int32)


def plan(
    lengths: jax.Array, micro_batches: int, widths: tuple[int, ...]
) -> tuple[jax.Array, jax.Array]:
    """Row order and each micro-batch's width, as the policy step runs them.

    Args:
      lengths: ``[B]`` int from :func:`needed_lengths`; ``B`` divisible by ``micro_batches``.
      micro_batches: number of consecutive equal micro-batches the reordered rows form.
      widths: from :func:`bucket_widths`.

    Returns:
      ``(order [B] int32, index [micro_batches] int32)``: :func:`longest_first`, and for each
      micro-batch of the reordered rows the :func:`bucket_index` of its longest row.
    """
    chex.assert_rank(lengths, 1)
    order = longest_first(lengths)
    need = jnp.max(jnp.asarray(lengths)[order].reshape(micro_batches, -1), axis=1)
    return order, bucket_index(need, widths)
