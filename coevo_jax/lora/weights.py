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

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
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


def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a bijection of uint32 with full avalanche."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def dropout_keep_mask(
    rng: jax.Array, shape: tuple[int, ...], rate: float
) -> tuple[jax.Array, float]:
    """Bernoulli keep mask for dropout at ``rate``, from a counter-based hash.

    LoRA dropout draws one mask per target module and layer, and ``jax.random`` spends a
    threefry evaluation (20 rounds) per 32-bit word, which on CPU makes the masks a large
    share of a policy step (figures in ``benchmarks/HISTORY.md``). A mask only needs
    independent-looking bits, so here ``rng`` is spent on two 32-bit seeds and element ``i``
    (row-major) keeps its input when ``fmix(fmix(i * phi + s0) ^ s1)`` reaches
    ``round(rate * 2**32)``, ``fmix`` being MurmurHash3's finaliser and ``phi`` the 32-bit
    golden ratio: a dozen integer ops that XLA fuses into the consumer. No library offers
    such a mask for JAX, hence written here.

    The keep probability is ``1 - round(rate * 2**32) / 2**32`` (within ``2**-33`` of
    ``1 - rate``); it is returned so the caller rescales by the exact value and the
    dropped input stays unbiased.

    Args:
      rng: PRNG key.
      shape: mask shape (any rank >= 1, fewer than ``2**32`` elements).
      rate: drop probability in ``(0, 1)``.

    Returns:
      ``(keep, keep_prob)``: a bool array of ``shape`` and the exact keep probability.
    """
    seeds, threshold = _draw(rng, rate)
    return _keep(seeds, shape, threshold), _keep_prob(threshold)


def _draw(rng: jax.Array, rate: float) -> tuple[jax.Array, int]:
    """Two uint32 seeds from ``rng`` and the 32-bit drop threshold of ``rate``."""
    threshold = min(max(round(rate * 2**32), 1), 2**32 - 1)
    return jax.random.bits(rng, (2,), jnp.uint32), threshold


def _keep_prob(threshold: int) -> float:
    return (2**32 - threshold) / 2**32


def _keep(seeds: jax.Array, shape: tuple[int, ...], threshold: int) -> jax.Array:
    """The keep mask of :func:`dropout_keep_mask` from its two uint32 ``seeds``."""
    size = int(np.prod(shape))
    if size >= 2**32:
        raise ValueError(f"dropout mask of shape {shape} has >= 2**32 elements")
    i = jax.lax.iota(jnp.uint32, size).reshape(shape)
    h = _fmix32(_fmix32(i * jnp.uint32(0x9E3779B9) + seeds[0]) ^ seeds[1])
    return h >= jnp.uint32(threshold)


def lora_delta(
    x: jax.Array,
    a: jax.Array,
    b: jax.Array,
    agent_ids: jax.Array,
    scale: float | jax.Array,
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
      scale: LoRA scaling, a number or a traced scalar (differentiable: it is folded into the
        gathered ``B`` rows, ``[B, r, out]``, instead of scaling the ``[B, T, out]`` output).
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
    a_rows = a[idx].astype(x.dtype)
    b_rows = (b[idx] * scale).astype(x.dtype)
    if dropout > 0.0 and rng is not None:
        seeds, threshold = _draw(rng, dropout)
    else:
        seeds, threshold = jnp.zeros((2,), jnp.uint32), 0
    y = _adapter(x, a_rows, b_rows, seeds, threshold)
    return jnp.where(on[:, None, None], y, jnp.zeros_like(y))


def _dropout(shape: tuple[int, ...], seeds: jax.Array, threshold: int):
    """``x -> dropout(x)`` for arrays of ``shape``, all with one keep mask (0 = identity)."""
    if threshold == 0:
        return lambda x: x
    keep, keep_prob = _keep(seeds, shape, threshold), _keep_prob(threshold)
    return lambda x: jnp.where(keep, x / jnp.asarray(keep_prob, x.dtype), 0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _adapter(x, a_rows, b_rows, seeds, threshold):
    """``dropped(x) @ a_rows @ b_rows`` per row; ``threshold`` 0 = no dropout.

    The hand-written VJP keeps ``x`` itself (shared by every module that reads the same
    input, e.g. q, k and v) and the ``[B, T, r]`` bottleneck, and regenerates the dropout
    mask from the two seeds in the backward. JAX's own VJP would keep each module's mask
    and dropped copy of ``x``: 7 extra activation tensors per layer, about as many bytes as
    the rest of the layer's residuals.
    """
    return _adapter_fwd(x, a_rows, b_rows, seeds, threshold)[0]


def _adapter_fwd(x, a_rows, b_rows, seeds, threshold):
    h = jnp.einsum("bti,bir->btr", _dropout(x.shape, seeds, threshold)(x), a_rows)
    y = jnp.einsum("btr,bro->bto", h, b_rows)
    return y, (x, a_rows, b_rows, seeds, h)


def _adapter_bwd(threshold, res, g):
    x, a_rows, b_rows, seeds, h = res
    drop = _dropout(x.shape, seeds, threshold)  # the forward's mask, built once
    d_b = jnp.einsum("btr,bto->bro", h, g)
    d_h = jnp.einsum("bto,bro->btr", g, b_rows)
    # [B, r, in] then transposed: XLA:CPU runs this form ~2x faster than "bti,btr->bir".
    d_a = jnp.swapaxes(jnp.einsum("btr,bti->bri", d_h, drop(x)), 1, 2)
    d_x = drop(jnp.einsum("btr,bir->bti", d_h, a_rows))
    return d_x.astype(x.dtype), d_a, d_b, None


_adapter.defvjp(_adapter_fwd, _adapter_bwd)
