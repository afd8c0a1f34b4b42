"""Per-token log-probs of completions under each sequence's agent, for the policy loss.

Layout (TRL's): a left-padded prompt block ``[B, P]`` followed by a right-padded completion
block ``[B, T]``. Completion token ``t`` sits at position ``P + t`` and is predicted by the
hidden state at ``P + t - 1``, so only those T hidden states go through the LM head: the
decoder is run to its final norm (``coevo_jax.models.forward`` with ``hidden_layers=(L,)``
and ``stop_after_hidden``), and the ``[B, T, V]`` logits are formed here. That skips the
prompt positions' logits and lets the vocabulary projection run in chunks over T under
``jax.checkpoint``, so that neither the fp32 logits nor their gradient ever exist whole
(for a 150k vocabulary and 1000-token completions they would be the largest buffers of the
step).
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models import ModelConfig, forward
from coevo_jax.models.decoder import batch_constraint
from coevo_jax.models.ops import ATTENTION_BLOCK


@struct.dataclass
class PolicyBatch:
    """One batch of scored trajectories, possibly from several agents.

    Attributes:
      prompt_ids: ``[B, P]`` int32, left-padded.
      prompt_mask: ``[B, P]`` 1 on real prompt tokens.
      completion_ids: ``[B, T]`` int32, right-padded.
      completion_mask: ``[B, T]`` 1 on completion tokens that count in the loss.
      agent_ids: ``[B]`` int32 agent of each sequence; -1 marks a padding row that no loss
        sees.
      advantages: ``[B]`` float32, one per sequence.
      old_logp: ``[B, T]`` float32 behaviour log-probs (from the sampler), or None for
        on-policy (the ratio is then exactly 1).
      ref_logp: ``[B, T]`` float32 reference log-probs, or None to compute them in the step
        with the adapter off.
    """

    prompt_ids: jax.Array
    prompt_mask: jax.Array
    completion_ids: jax.Array
    completion_mask: jax.Array
    agent_ids: jax.Array
    advantages: jax.Array
    old_logp: jax.Array | None = None
    ref_logp: jax.Array | None = None

    @property
    def batch_size(self) -> int:
        return int(self.completion_ids.shape[0])

    def check(self) -> None:
        """Shape checks with messages that name the field."""
        b, t = self.completion_ids.shape
        p = self.prompt_ids.shape
        if len(p) != 2 or p[0] != b or p[1] < 1:
            raise ValueError(f"prompt_ids must be [B={b}, P>=1], got {p}")
        expect = {
            "prompt_mask": (b, p[1]),
            "completion_mask": (b, t),
            "agent_ids": (b,),
            "advantages": (b,),
            "old_logp": (b, t),
            "ref_logp": (b, t),
        }
        for name, shape in expect.items():
            v = getattr(self, name)
            if v is not None and tuple(v.shape) != shape:
                raise ValueError(
                    f"PolicyBatch.{name} must have shape {shape}, got {tuple(v.shape)}"
                )


def _lm_head(params: dict[str, Any], cfg: ModelConfig, dtype: Any) -> jax.Array:
    """``[H, V]`` output projection (the embedding's transpose when tied)."""
    if cfg.tie_word_embeddings:
        return params["embed"].astype(dtype).T
    return params["lm_head"].astype(dtype)


def _fold(v: int) -> int:
    """Lane count ``c`` for :func:`_exp_sums`, a divisor of ``v``; 1 = do not fold.

    Preferred: a multiple of 16 (whole vector registers) near 384 that leaves at most 512
    terms per lane; else the divisor up to 4096 that leaves the fewest terms per lane.
    """
    if v < 4096:
        return 1
    divisors = [c for c in range(128, 4097) if v % c == 0]
    aligned = [c for c in divisors if c % 16 == 0 and v // c <= 512]
    if aligned:
        return min(aligned, key=lambda c: abs(c - 384))
    return max(divisors, default=1)


def _exp_sums(logits: jax.Array, m: jax.Array, with_el: bool) -> tuple[jax.Array, jax.Array | None]:
    """``sum_v e`` and (if ``with_el``) ``sum_v e * l`` with ``e = exp(l - m)``, fp32.

    ``logits`` ``[..., V]``, ``m`` ``[..., 1]``; returns ``[...]`` each. XLA:CPU hands a
    plain row sum over V to YNNPACK, which is slow enough to matter in a policy step
    (figures in ``benchmarks/HISTORY.md``). Here the vocabulary axis is folded to
    ``[V / c, c]`` and summed over ``V / c`` first: a reduction over a non-minor axis,
    vectorised along the ``c`` lanes, then ``c`` lane totals. With the entropy, both sums are one variadic reduce, so
    ``e`` is recomputed on the fly instead of stored. Each lane adds only ``V / c`` terms,
    so the rounding stays at the pairwise sum's level (2.5e-7 relative on SmolLM2's
    49152-token vocabulary, against 1e-4 for a variadic reduce over all of V).
    """
    *lead, v = logits.shape
    c = _fold(v)
    if c == 1:
        e = jnp.exp(logits - m)
        return jnp.sum(e, axis=-1), jnp.sum(e * logits, axis=-1) if with_el else None
    lf = logits.reshape(*lead, v // c, c)
    e = jnp.exp(lf - m[..., None])
    axis = len(lead)
    if not with_el:
        # Lane sums, then a dot with ones rather than a second reduce: XLA would merge two
        # reduces back into one over all of V, which YNNPACK runs ~10x slower.
        lanes = jnp.sum(e, axis=axis)
        return jnp.einsum("...c,c->...", lanes, jnp.ones((c,), jnp.float32)), None
    zero = jnp.float32(0)
    s, s_el = jax.lax.reduce(
        (e, e * lf), (zero, zero), lambda a, b: (a[0] + b[0], a[1] + b[1]), (axis,)
    )
    return jnp.sum(s, axis=-1), jnp.sum(s_el, axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _head_logprobs(
    h: jax.Array, head: jax.Array, tgt: jax.Array, with_entropy: bool
) -> tuple[jax.Array, jax.Array | None]:
    """One piece of :func:`token_logprobs`; see there. Its VJP is written by hand."""
    out, _ = _head_logprobs_fwd(h, head, tgt, with_entropy)
    return out


def _head_logprobs_fwd(h, head, tgt, with_entropy):
    # One exp pass serves the normaliser and the entropy: with e = exp(l - m) and s = sum(e),
    # lse = m + log s and entropy = lse - sum(e * l) / s. Autodiff of the textbook form runs
    # separate exp passes for logsumexp, the softmax of the entropy and the backward.
    # h is rounded to the head's dtype here rather than by the caller, so fp32 hidden states
    # with a bf16 head still make a bf16 x bf16 -> fp32 product (see decoder.linear).
    logits = jnp.einsum(
        "bth,hv->btv", h.astype(head.dtype), head, preferred_element_type=jnp.float32
    )
    # Rows split, vocabulary whole: with the head's vocabulary axis sharded, GSPMD may keep
    # the logits split by vocabulary instead, and then the fold in _exp_sums (which need
    # not divide by the mesh) gathers every row's full logits onto every device.
    logits = batch_constraint(logits)
    m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    s, s_el = _exp_sums(logits, m, with_entropy)
    lse = m[..., 0] + jnp.log(s)
    picked = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]
    ent = lse - s_el / s if with_entropy else None
    return (picked - lse, ent), (h, head, tgt, logits, lse)


def _head_logprobs_bwd(with_entropy, res, g):
    del with_entropy  # the entropy is a metric: no gradient flows through it
    h, head, tgt, logits, lse = res
    g_lp = g[0]
    # d lp / d logits = onehot(target) - softmax(logits)
    onehot = jnp.arange(logits.shape[-1])[None, None, :] == tgt[..., None]
    d_logits = g_lp[..., None] * (onehot.astype(jnp.float32) - jnp.exp(logits - lse[..., None]))
    d_logits = d_logits.astype(head.dtype)
    d_h = jnp.einsum("btv,hv->bth", d_logits, head, preferred_element_type=jnp.float32)
    d_head = jnp.einsum(
        "bth,btv->hv", h.astype(head.dtype), d_logits, preferred_element_type=jnp.float32
    )
    d_tgt = np.zeros(tgt.shape, jax.dtypes.float0)
    return d_h.astype(h.dtype), d_head.astype(head.dtype), d_tgt


_head_logprobs.defvjp(_head_logprobs_fwd, _head_logprobs_bwd)


def token_logprobs(
    hidden: jax.Array,
    head: jax.Array,
    targets: jax.Array,
    *,
    chunk_size: int = 0,
    with_entropy: bool = True,
) -> tuple[jax.Array, jax.Array | None]:
    """``log softmax(hidden @ head)[target]`` and the softmax entropy, per position.

    Args:
      hidden: ``[B, T, H]`` final-normed hidden states (any float dtype; rounded to
        ``head``'s dtype for the matmul).
      head: ``[H, V]`` output projection (the matmul operand dtype).
      targets: ``[B, T]`` int token ids whose log-prob is wanted.
      chunk_size: > 0 splits T into chunks of this size, each rematerialised in the backward
        pass, bounding the live logits to ``[B, chunk_size, V]``; 0 = one piece.
      with_entropy: also return the entropy (a metric: no gradient flows through it).

    Returns:
      ``(logp [B, T] float32, entropy [B, T] float32 or None)``. The matmul runs in the
      head's dtype with fp32 accumulation; log-softmax in fp32. ``logp`` is differentiable
      w.r.t. ``hidden`` and ``head`` through a hand-written VJP: the forward shares one
      ``exp`` pass over the ``[B, T, V]`` logits between the normaliser and the entropy, and
      the backward is the single pass ``g * (onehot(target) - softmax)`` from the saved
      logits and log-normaliser.
    """
    chex.assert_rank(hidden, 3)
    chex.assert_shape(targets, hidden.shape[:2])
    targets = targets.astype(jnp.int32)

    def piece(h, tgt):
        return _head_logprobs(h, head, tgt, with_entropy)

    b, t, h = hidden.shape
    if chunk_size <= 0 or chunk_size >= t:
        return piece(hidden, targets)
    n = -(-t // chunk_size)
    pad = n * chunk_size - t
    hp = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk_size, h).swapaxes(0, 1)
    tp = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk_size).swapaxes(0, 1)
    body = jax.checkpoint(lambda _, xs: (None, piece(*xs)))
    _, (lp, ent) = jax.lax.scan(body, None, (hp, tp))
    lp = lp.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :t]
    if ent is not None:
        ent = ent.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :t]
    return lp, ent


def sequence_logprobs(
    params: dict[str, Any],
    cfg: ModelConfig,
    lora: LoRAWeights | None,
    batch: PolicyBatch,
    *,
    agent_ids: jax.Array | None = None,
    lora_rng: jax.Array | None = None,
    compute_dtype: Any = jnp.bfloat16,
    matmul_dtype: Any = None,
    remat: bool | str = False,
    chunk_size: int = 0,
    with_entropy: bool = True,
    temperature: float = 1.0,
    attention: str = "xla",
    attention_block: int = ATTENTION_BLOCK,
) -> tuple[jax.Array, jax.Array | None]:
    """Per-token log-probs of ``batch.completion_ids``, each row under its own agent.

    All agents share one forward pass: the stacked adapters pick each row's slice
    (``coevo_jax.lora``). Agent -1 (or ``lora=None``) is the bare backbone, i.e. the
    reference policy.

    Args:
      params: frozen backbone params (``docs/interfaces.md``); any float dtype.
      cfg: model config (static).
      lora: stacked adapters (fp32 master copies are cast to the compute dtype per layer),
        or None for the reference.
      batch: the :class:`PolicyBatch`; only ids, masks and ``agent_ids`` are read.
      agent_ids: ``[B]`` override of ``batch.agent_ids`` (e.g. all -1 for the reference).
      lora_rng: enables LoRA dropout (training).
      compute_dtype: activation dtype; log-softmax is always fp32.
      matmul_dtype: operand dtype of the projection and LM-head matmuls (fp32
        accumulation); None = ``compute_dtype``. Pass ``params`` already in this dtype: a
        frozen backbone is then not re-cast on every call.
      remat: rematerialise decoder blocks in the backward pass (a bool or a policy name,
        ``RLConfig.remat``).
      chunk_size: vocabulary projection chunking over T (see :func:`token_logprobs`).
      with_entropy: also return per-token entropies (no gradient).
      temperature: > 0; log-probs of ``softmax(logits / temperature)``, the distribution a
        sampler at that temperature draws from (before any top-p cut). The final hidden
        states are divided by it before the head matmul, which equals dividing the logits
        up to the rounding of the head's operand dtype.
      attention, attention_block: the decoder's attention implementation and its tile edge
        (``RLConfig.attention``, ``RLConfig.attention_block``).

    Returns:
      ``(logp, entropy)``: ``[B, T]`` float32 each (entropy None when not asked for), values
      at padded completion positions are meaningless and must be masked by the caller.
      Differentiable w.r.t. ``lora.params`` (and ``params``).
    """
    p_len = batch.prompt_ids.shape[1]
    t_len = batch.completion_ids.shape[1]
    ids = jnp.concatenate([batch.prompt_ids, batch.completion_ids], axis=1).astype(jnp.int32)
    mask = jnp.concatenate([batch.prompt_mask, batch.completion_mask], axis=1).astype(jnp.int32)
    ids_agent = batch.agent_ids if agent_ids is None else agent_ids
    lora_arg = None if lora is None else (lora, ids_agent.astype(jnp.int32))
    out = forward(
        params,
        cfg,
        ids,
        attention_mask=mask,
        lora=lora_arg,
        lora_rng=lora_rng,
        hidden_layers=(cfg.num_layers,),
        stop_after_hidden=True,
        remat=remat,
        compute_dtype=compute_dtype,
        matmul_dtype=matmul_dtype,
        attention=attention,
        attention_block=attention_block,
    )
    hidden = out.hidden_states[cfg.num_layers][:, p_len - 1 : p_len - 1 + t_len]
    if temperature != 1.0:
        hidden = hidden / jnp.asarray(temperature, hidden.dtype)
    head = _lm_head(params, cfg, compute_dtype if matmul_dtype is None else matmul_dtype)
    return token_logprobs(
        hidden,
        head,
        batch.completion_ids.astype(jnp.int32),
        chunk_size=chunk_size,
        with_entropy=with_entropy,
    )
