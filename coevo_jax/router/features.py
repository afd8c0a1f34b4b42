"""Query features from the frozen router backbone (CERA-MoA §2 step 2).

``h(q)`` is the concatenation of the hidden states after decoder blocks ``floor(L/2)`` and
``floor(3L/4)`` (HF ``hidden_states`` indexing, 0 = embeddings) at the query's last
non-padding token, ``[B, 2H]``. The pass stops after block ``floor(3L/4)``: the remaining
quarter of the stack and the LM head are never run, which is what makes routing cheap.
``layers="final"`` is the ablation: HF's last hidden state (after the final norm), ``[B, H]``.

Queries are left-truncated to ``max_len`` tokens (the paper's 800) before the pass, i.e. the
*last* ``max_len`` tokens of every row are kept; the truncation happens on device, per row,
so it is correct for any padding side.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.models import forward


def feature_layers(num_layers: int, layers: str = "mid") -> tuple[int, ...]:
    """HF hidden-state indices behind the features: ``(L//2, 3L//4)`` or ``(L,)``."""
    if layers == "mid":
        return (num_layers // 2, (3 * num_layers) // 4)
    if layers == "final":
        return (num_layers,)
    raise ValueError(f"layers must be 'mid' or 'final', got {layers!r}")


def left_truncate(
    input_ids: jax.Array, attention_mask: jax.Array, max_len: int
) -> tuple[jax.Array, jax.Array]:
    """Keeps each row's last ``max_len`` real tokens, returned left-padded.

    Args:
      input_ids: ``[B, T]`` int.
      attention_mask: ``[B, T]``, 1 = real token; real tokens are contiguous (left or right
        padding).
      max_len: static token limit.

    Returns:
      ``(ids, mask)`` of shape ``[B, min(T, max_len)]``: row b ends with its last real token
      in the last column. A left-padded batch with ``T <= max_len`` comes back unchanged.
    """
    chex.assert_rank([input_ids, attention_mask], 2)
    chex.assert_equal_shape([input_ids, attention_mask])
    b, t = input_ids.shape
    w = min(t, max_len)
    mask = attention_mask.astype(jnp.int32)
    # Last real token: T - 1 - (first 1 in the reversed row); all-pad rows use T - 1.
    last = t - 1 - jnp.argmax(mask[:, ::-1], axis=-1)
    idx = last[:, None] - (w - 1) + jnp.arange(w)[None, :]
    inside = idx >= 0
    idx = jnp.maximum(idx, 0)
    ids = jnp.take_along_axis(input_ids, idx, axis=1)
    mask = jnp.take_along_axis(mask, idx, axis=1) * inside
    return jnp.where(mask > 0, ids, 0).astype(input_ids.dtype), mask


@functools.partial(jax.jit, static_argnames=("cfg", "layers", "max_len", "compute_dtype"))
def features(
    params: Any,
    cfg: Any,
    input_ids: jax.Array,
    attention_mask: jax.Array | None = None,
    *,
    layers: str = "mid",
    max_len: int = 800,
    compute_dtype: Any = jnp.float32,
) -> jax.Array:
    """Router features ``h(q)`` from a partial forward pass of the frozen backbone.

    Args:
      params: decoder params pytree (``docs/interfaces.md``); not differentiated here.
      cfg: ``coevo_jax.models.ModelConfig`` (static).
      input_ids: ``[B, T]`` int token ids.
      attention_mask: ``[B, T]``, 1 = real token; None = no padding.
      layers: ``"mid"`` -> ``[B, 2H]`` (blocks ``L//2`` and ``3L//4``), ``"final"`` ->
        ``[B, H]`` (the final-norm output, as HF's ``hidden_states[L]``).
      max_len: left-truncation limit in tokens (static).
      compute_dtype: activation dtype of the pass (bf16 for speed).

    Returns:
      ``[B, len(indices) * H]`` float32, taken at each row's last real token.
    """
    if attention_mask is None:
        attention_mask = jnp.ones_like(input_ids, dtype=jnp.int32)
    ids, mask = left_truncate(input_ids, attention_mask, max_len)
    indices = feature_layers(cfg.num_layers, layers)
    out = forward(
        jax.lax.stop_gradient(params),
        cfg,
        ids,
        attention_mask=mask,
        hidden_layers=indices,
        stop_after_hidden=True,
        compute_dtype=compute_dtype,
    )
    return jnp.concatenate(
        [out.hidden_states[i][:, -1, :].astype(jnp.float32) for i in indices], axis=-1
    )


def pad_queries(
    token_lists: Sequence[Sequence[int]],
    *,
    max_len: int = 800,
    pad_id: int = 0,
    bucket: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """Host-side batching: left-truncate to ``max_len`` and left-pad to a common length.

    The common length is the longest kept row rounded up to a multiple of ``bucket`` (capped
    at ``max_len``), so a training run compiles :func:`features` for a handful of shapes
    rather than one per batch.

    Returns:
      ``(input_ids [B, T] int32, attention_mask [B, T] int32)``.

    Raises:
      ValueError: if a query is empty (it has no last token to read features from).
    """
    kept = [list(t)[-max_len:] for t in token_lists]
    for i, t in enumerate(kept):
        if not t:
            raise ValueError(f"query {i} has no tokens; the router needs at least one")
    longest = max(len(t) for t in kept)
    length = min(max_len, -(-longest // bucket) * bucket)
    ids = np.full((len(kept), length), pad_id, np.int32)
    mask = np.zeros((len(kept), length), np.int32)
    for i, t in enumerate(kept):
        ids[i, length - len(t) :] = t
        mask[i, length - len(t) :] = 1
    return ids, mask


def standardization(
    h: jax.Array, *, rel_floor: float = 1e-2, center: float = 1.0
) -> tuple[jax.Array, jax.Array]:
    """Per-dimension whitening statistics of a feature sample (``router.feature_norm``).

    Args:
      h: ``[Q, D]`` features of ``Q >= 2`` queries.
      rel_floor: each dimension's standard deviation is floored at ``rel_floor`` times the
        median one (and at 1e-6), so a dimension that barely varies over the sample is not
        blown up into noise of unit scale (a constant one maps to 0).
      center: the fraction of the sample mean that is subtracted (``router.feature_center``):
        1 centres the sample, 0 only rescales it, keeping the shared direction of the
        features.

    Returns:
      ``(shift, scale)``, each ``[D]`` float32: ``center`` times the mean, and
      ``1 / floored std``. With ``center = 1`` :func:`standardize` gives the sample zero mean
      and unit variance in every dimension above the floor; with less, every dimension keeps
      ``(1 - center)`` of its mean in units of its spread.
    """
    chex.assert_rank(h, 2)
    if h.shape[0] < 2:
        raise ValueError(f"need features of >= 2 queries for their spread, got {h.shape[0]}")
    h = jnp.asarray(h, jnp.float32)
    std = h.std(axis=0)
    floor = jnp.maximum(rel_floor * jnp.median(std), 1e-6)
    return center * h.mean(axis=0), 1.0 / jnp.maximum(std, floor)


def standardize(h: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """``(h - shift) * scale``: ``h [B, D]``, ``shift`` and ``scale`` ``[D]``; float32 out.

    With ``shift = 0`` and ``scale = 1`` (a fresh router state) it returns ``h`` unchanged.
    """
    chex.assert_rank(h, 2)
    chex.assert_shape([shift, scale], (h.shape[1],))
    return (h.astype(jnp.float32) - shift) * scale
