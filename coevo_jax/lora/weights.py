"""Stacked multi-agent LoRA weights and their application inside a projection.

N agents share one frozen backbone. Every target module carries ``A: [L, N, in, r]`` and
``B: [L, N, r, out]`` (L decoder layers, stacked so the decoder can ``lax.scan`` over layers),
and each sequence in a batch names its agent. Agent id -1 switches the adapter off, which is
how the reference policy is evaluated without a second model.

Gather versus segment matmul: we gather each row's ``A``/``B`` slice (``[B, in, r]``) and run
two small batched einsums. With r << in the adapter is ~2*r/in of the base matmul's FLOPs;
a segment (sort-by-agent) matmul would need a sort, a scatter back and padding of uneven
groups, which on CPU costs more than the gathered copy of ``B * in * r`` floats it saves.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct

TARGET_MODULES = ("q", "k", "v", "o", "gate", "up", "down")


@struct.dataclass
class LoRAWeights:
    """Stacked adapters for N agents.

    Attributes:
      params: ``{module: {"A": [L, N, in, r], "B": [L, N, r, out]}}`` for module in a subset
        of ``TARGET_MODULES``. This dict is the only trainable pytree (optimisers, checkpoints
        and exports touch only it).
      scale: ``alpha / r`` (or ``alpha / sqrt(r)`` for rsLoRA); static.
      dropout: LoRA dropout rate applied to the adapter input in training; static.
    """

    params: dict[str, dict[str, jax.Array]]
    scale: float = struct.field(pytree_node=False, default=2.0)
    dropout: float = struct.field(pytree_node=False, default=0.0)

    @property
    def n_agents(self) -> int:
        first = next(iter(self.params.values()))
        return int(first["A"].shape[1])

    @property
    def rank(self) -> int:
        first = next(iter(self.params.values()))
        return int(first["A"].shape[-1])


def dropout_keep_mask(
    rng: jax.Array, shape: tuple[int, ...], rate: float
) -> tuple[jax.Array, float]:
    """Bernoulli keep mask for dropout at ``rate``, from 16-bit uniforms.

    ``jax.random.bernoulli`` spends one 32-bit threefry output per element; LoRA dropout
    draws one mask per target module and layer (~300M elements per SmolLM2 policy step), and
    that generator was a measurable share of the step. Here each 32-bit word is split into
    two 16-bit uniforms, halving the generator work. The keep probability is then
    ``1 - round(rate * 2**16) / 2**16`` (within ``2**-17`` of ``1 - rate``); it is returned
    so the caller rescales by the exact value and the dropped input stays unbiased.

    Args:
      rng: PRNG key.
      shape: mask shape (any rank >= 1).
      rate: drop probability in ``(0, 1)``.

    Returns:
      ``(keep, keep_prob)``: a bool array of ``shape`` and the exact keep probability.
    """
    *lead, d = shape
    threshold = round(rate * 65536)
    words = jax.random.bits(rng, (*lead, (d + 1) // 2), jnp.uint32)
    keep = jnp.concatenate([(words & 0xFFFF) >= threshold, (words >> 16) >= threshold], -1)
    return keep[..., :d], (65536 - threshold) / 65536


def lora_delta(
    x: jax.Array,
    a: jax.Array,
    b: jax.Array,
    agent_ids: jax.Array,
    scale: float,
    *,
    dropout: float = 0.0,
    rng: jax.Array | None = None,
) -> jax.Array:
    """Per-row adapter output ``scale * dropout(x) @ A[agent] @ B[agent]`` for one layer.

    Args:
      x: ``[B, T, in]`` projection input (any float dtype; the result has x's dtype).
      a: ``[N, in, r]`` this layer's A for every agent.
      b: ``[N, r, out]`` this layer's B for every agent.
      agent_ids: ``[B]`` int; -1 means adapter off, which yields exact zeros for that row.
      scale: LoRA scaling.
      dropout: rate; applied only when ``rng`` is given (training).
      rng: PRNG key for dropout.

    Returns:
      ``[B, T, out]``. Gradients w.r.t. ``a``/``b`` reach only the slices of agents present
      in ``agent_ids`` (the gather's transpose is a scatter-add into those slices).
    """
    chex.assert_rank(x, 3)
    chex.assert_rank([a, b], 3)
    chex.assert_shape(agent_ids, (x.shape[0],))
    on = agent_ids >= 0
    idx = jnp.where(on, agent_ids, 0)
    if dropout > 0.0 and rng is not None:
        keep, keep_prob = dropout_keep_mask(rng, x.shape, dropout)
        x = jnp.where(keep, x / keep_prob, 0).astype(x.dtype)
    a_rows = a[idx].astype(x.dtype)
    b_rows = b[idx].astype(x.dtype)
    h = jnp.einsum("bti,bir->btr", x, a_rows)
    y = jnp.einsum("btr,bro->bto", h, b_rows) * jnp.asarray(scale, x.dtype)
    return jnp.where(on[:, None, None], y, jnp.zeros_like(y))
