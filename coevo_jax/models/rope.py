"""Rotary position embeddings: inverse frequencies for each supported scaling, and rotation.

Frequencies are host-side numpy constants computed in float32 with the same operation order
as transformers, so fp32 logits agree to ~1e-6. Longrope picks its short or long factors per
call from the largest position in the batch, as transformers does (the pick is a traced
``where``, so one compiled function serves both regimes).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.models.config import ModelConfig


def _base_inv_freq(cfg: ModelConfig) -> np.ndarray:
    dim = cfg.rotary_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exponents)).astype(np.float32)


def _llama3_inv_freq(cfg: ModelConfig) -> np.ndarray:
    inv = _base_inv_freq(cfg)
    factor = cfg.rope_factor
    lo, hi = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
    old_ctx = float(cfg.original_max_position_embeddings)
    low_wavelen, high_wavelen = old_ctx / lo, old_ctx / hi
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > low_wavelen, inv / np.float32(factor), inv)
    smooth = (np.float32(old_ctx) / wavelen - np.float32(lo)) / np.float32(hi - lo)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def inv_freq_table(cfg: ModelConfig) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Host constants ``(inv_freq, long_inv_freq or None, cos/sin scale)``, each ``[rotary_dim/2]``."""
    if cfg.rope_type == "llama3":
        return _llama3_inv_freq(cfg), None, 1.0
    if cfg.rope_type == "longrope":
        dim = cfg.rotary_dim
        shape = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
        powers = np.float32(cfg.rope_theta) ** shape
        short = np.float32(1.0) / (np.asarray(cfg.rope_short_factor, np.float32) * powers)
        long_ = np.float32(1.0) / (np.asarray(cfg.rope_long_factor, np.float32) * powers)
        return short.astype(np.float32), long_.astype(np.float32), cfg.longrope_attention_factor
    return _base_inv_freq(cfg), None, 1.0


def rope_cos_sin(cfg: ModelConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables for ``positions`` ``[B, T]`` int: each ``[B, T, rotary_dim]`` float32."""
    inv, long_inv, scale = inv_freq_table(cfg)
    inv = jnp.asarray(inv)
    if long_inv is not None:
        # transformers switches to the long factors once the sequence outgrows the original
        # context, judged on the largest position in the whole batch.
        use_long = jnp.max(positions) + 1 > cfg.original_max_position_embeddings
        inv = jnp.where(use_long, jnp.asarray(long_inv), inv)
    freqs = positions.astype(jnp.float32)[..., None] * inv
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb) * scale, jnp.sin(emb) * scale


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates the first ``rotary_dim`` channels of each head (rotate-half convention).

    Args:
      x: ``[B, T, heads, D]`` queries or keys.
      cos, sin: ``[B, T, rotary_dim]`` float32 from :func:`rope_cos_sin`.

    Returns:
      ``x`` rotated, same shape and dtype; the arithmetic runs in float32.
    """
    rot = cos.shape[-1]
    xf = x.astype(jnp.float32)
    x_rot, x_pass = xf[..., :rot], xf[..., rot:]
    half = rot // 2
    rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
    out = x_rot * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    if x_pass.shape[-1]:
        out = jnp.concatenate([out, x_pass], axis=-1)
    return out.astype(x.dtype)
