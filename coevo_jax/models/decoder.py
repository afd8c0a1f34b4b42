"""The decoder forward pass (Llama, Qwen3, Phi-3 families) and its Flax NNX wrapper.

``forward`` is the single source of the math: a pure function of a params pytree (layout in
``docs/interfaces.md``: layers stacked on a leading axis, matrices ``[in, out]``) that scans
one block body over the layer stack. The stack is cut into segments at the hidden-state
indices asked for, so returning mid-layer features costs nothing extra and a partial pass
(``stop_after_hidden``) simply never runs the later segments. ``Decoder`` holds the same
pytree as ``nnx.Param`` leaves for code that wants a module object.

The KV cache is carried through the scan whole (``[L, B, S, nKV, D]``) and each layer writes
its T new slots with ``dynamic_update_slice``; XLA updates loop-carried buffers in place, so a
decode step touches the new slots only, instead of rewriting every layer's cache.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx, struct

from coevo_jax.lora.weights import TARGET_MODULES, LoRAWeights, lora_delta
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.ops import (
    ATTENTION_BLOCK,
    attention,
    embed_rows,
    linear,
    resolve_attention,
    silu_mul,
)
from coevo_jax.models.rope import apply_rope, rope_cos_sin

Params = dict[str, Any]
# Query blocks of the cache-free (training / scoring) attention: `ops.attend`.
_CAUSAL_BLOCKS = 4


# `forward`'s `remat` by name: what a rematerialised block keeps for the backward (the rest
# is recomputed). True / False are accepted as "full" / "none".
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
_CHECKPOINT_POLICIES = {
    "dots": jax.checkpoint_policies.dots_saveable,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def remat_name(remat: bool | str) -> str:
    """``remat`` as a ``REMAT_POLICIES`` name (True = ``"full"``, False = ``"none"``)."""
    name = ("full" if remat else "none") if isinstance(remat, bool) else remat
    if name not in REMAT_POLICIES:
        raise ValueError(f"remat must be a bool or one of {REMAT_POLICIES}, got {remat!r}")
    return name


def _rematerialised(body: Any, remat: bool | str) -> Any:
    """``body`` under the ``jax.checkpoint`` of ``remat`` (unchanged for ``"none"``)."""
    name = remat_name(remat)
    if name == "none":
        return body
    # "full" is jax.checkpoint's default (save nothing but the inputs), written as it always was.
    return jax.checkpoint(body, policy=_CHECKPOINT_POLICIES.get(name))


# Vector params: scales of fp32 statistics, never matmul operands.
_NORMS = ("attn_norm", "mlp_norm", "q_norm", "k_norm", "final_norm")


@struct.dataclass
class KVCache:
    """Per-layer keys and values, ``k``/``v``: ``[L, B, S, nKV, D]`` (S = cache length).

    Slot ``s`` of row ``b`` holds the token at that slot of the row's left-padded sequence;
    which slots are real is given by the ``[B, S]`` attention mask passed to ``forward``.
    """

    k: jax.Array
    v: jax.Array

    @classmethod
    def init(cls, cfg: ModelConfig, batch: int, length: int, dtype: Any = jnp.float32) -> KVCache:
        """Zeros for ``batch`` rows of ``length`` slots."""
        shape = (cfg.num_layers, batch, length, cfg.num_kv_heads, cfg.head_dim)
        return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype))

    @property
    def length(self) -> int:
        return int(self.k.shape[2])


@struct.dataclass
class DecoderOutput:
    """What ``forward`` returns.

    Attributes:
      logits: ``[B, T, V]`` float32, or None when ``stop_after_hidden`` was set.
      hidden_states: ``{index: [B, T, H]}`` in the compute dtype, keyed by the indices asked
        for (HF ``hidden_states`` indexing: 0 = embeddings, i = output of block i-1, and the
        last index L carries the final norm, as in transformers).
      cache: the updated KVCache, or None when none was given.
    """

    logits: jax.Array | None
    hidden_states: dict[int, jax.Array]
    cache: KVCache | None


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last axis; statistics in float32, result in ``x.dtype``."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return weight.astype(x.dtype) * y.astype(x.dtype)


class BlockLoRA(NamedTuple):
    """One layer's adapters and how every row applies them (see :func:`lora_delta`).

    Attributes:
      params: ``{module: {"A": [N, in, r], "B": [N, r, out]}}``, this layer's slice.
      agent_ids: ``[B]`` agent of each row; -1 leaves the row the base model.
      scale: ``alpha / r``.
      dropout: LoRA dropout rate (applied only when ``rng`` is set).
      rng: this layer's dropout key, or None.
    """

    params: dict[str, dict[str, jax.Array]]
    agent_ids: jax.Array
    scale: float
    dropout: float
    rng: jax.Array | None


class BlockInputs(NamedTuple):
    """What one decoder block reads besides the residual stream.

    Attributes:
      layer: scalar int index of the block in the stack.
      norms: this layer's slices of the norm vectors of ``params["layers"]``.
      stacks: the whole ``params["layers"]``; projections read their matrix at ``layer``
        (see :func:`linear`).
      cos, sin: RoPE tables of the T new positions, ``[B, T, rotary_dim]`` (``rope_cos_sin``).
      allowed: ``[B, T, S]`` bool, which key slots each query may attend to.
      lora: this layer's adapters, or None.
      cache: the whole stacked KV cache, or None (no cache).
      cache_index: scalar slot of the first new token (used only with ``cache``).
    """

    layer: jax.Array
    norms: Params
    stacks: Params
    cos: jax.Array
    sin: jax.Array
    allowed: jax.Array
    lora: BlockLoRA | None
    cache: KVCache | None
    cache_index: jax.Array | int


def _project(h: jax.Array, name: str, inp: BlockInputs, matmul_dtype: Any) -> jax.Array:
    """Projection ``name`` of ``h`` at this layer, plus each row's LoRA delta when adapted."""
    y = linear(h, inp.stacks[name], matmul_dtype, index=inp.layer)
    lora = inp.lora
    if lora is not None and name in lora.params:
        key = None if lora.rng is None else jax.random.fold_in(lora.rng, TARGET_MODULES.index(name))
        delta = lora_delta(
            h,
            lora.params[name]["A"],
            lora.params[name]["B"],
            lora.agent_ids,
            lora.scale,
            dropout=lora.dropout,
            rng=key,
        )
        # A select rather than `y + 0`: once XLA fuses the add into a consumer (Qwen3's
        # q/k norm) the sum can be contracted/reassociated, and adapter-off rows would
        # drift by an ulp from the base model. The select keeps them bit-exact.
        on = (lora.agent_ids >= 0)[:, None, None]
        y = jnp.where(on, y + delta.astype(y.dtype), y)
    return y


def _attention(
    cfg: ModelConfig,
    x: jax.Array,
    inp: BlockInputs,
    compute_dtype: Any,
    matmul_dtype: Any,
    impl: str = "xla",
    block: int = ATTENTION_BLOCK,
) -> tuple[jax.Array, KVCache | None]:
    """The attention half of a block: ``(o-projection of attention(norm(x)), updated cache)``.

    Queries and keys get the optional q/k norm and RoPE; with a cache, the T new keys and
    values are written at ``cache_index`` of this layer and attention reads the whole layer.
    """
    b, t, _ = x.shape
    h = rms_norm(x, inp.norms["attn_norm"], cfg.rms_norm_eps)
    q = _project(h, "q", inp, matmul_dtype).reshape(b, t, cfg.num_heads, cfg.head_dim)
    k = _project(h, "k", inp, matmul_dtype).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = _project(h, "v", inp, matmul_dtype).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    if cfg.qk_norm:
        q = rms_norm(q, inp.norms["q_norm"], cfg.rms_norm_eps)
        k = rms_norm(k, inp.norms["k_norm"], cfg.rms_norm_eps)
    q = apply_rope(q, inp.cos, inp.sin)
    k = apply_rope(k, inp.cos, inp.sin)
    new_cache = None
    if inp.cache is not None:
        start = (inp.layer, 0, inp.cache_index, 0, 0)
        ck = jax.lax.dynamic_update_slice(inp.cache.k, k[None].astype(inp.cache.k.dtype), start)
        cv = jax.lax.dynamic_update_slice(inp.cache.v, v[None].astype(inp.cache.v.dtype), start)
        new_cache = KVCache(k=ck, v=cv)
        k = jax.lax.dynamic_index_in_dim(ck, inp.layer, 0, keepdims=False).astype(compute_dtype)
        v = jax.lax.dynamic_index_in_dim(cv, inp.layer, 0, keepdims=False).astype(compute_dtype)
    # Without a cache, queries and keys are the same T slots and `allowed` is causal, so
    # query blocks can skip the keys after them.
    blocks = _CAUSAL_BLOCKS if inp.cache is None else 1
    attn = attention(
        q, k, v, inp.allowed, cfg.num_kv_heads, impl=impl, causal_blocks=blocks, block_size=block
    )
    return _project(attn, "o", inp, matmul_dtype), new_cache


def _mlp(cfg: ModelConfig, x: jax.Array, inp: BlockInputs, matmul_dtype: Any) -> jax.Array:
    """The MLP half of a block: ``down(silu(gate(norm(x))) * up(norm(x)))``."""
    h = rms_norm(x, inp.norms["mlp_norm"], cfg.rms_norm_eps)
    gate = _project(h, "gate", inp, matmul_dtype)
    up = _project(h, "up", inp, matmul_dtype)
    return _project(silu_mul(gate, up), "down", inp, matmul_dtype)


def _block(
    cfg: ModelConfig,
    x: jax.Array,
    inp: BlockInputs,
    compute_dtype: Any,
    matmul_dtype: Any,
    impl: str = "xla",
    block: int = ATTENTION_BLOCK,
) -> tuple[jax.Array, KVCache | None]:
    """One pre-norm decoder block: ``x + attention``, then ``+ mlp``; returns the new cache."""
    attn, new_cache = _attention(cfg, x, inp, compute_dtype, matmul_dtype, impl, block)
    x = x + attn
    x = x + _mlp(cfg, x, inp, matmul_dtype)
    return x, new_cache


def batch_constraint(x: jax.Array) -> jax.Array:
    """Pins the residual stream's batch axis to the mesh's ``data``/``fsdp`` axes.

    Only under a mesh context (``jax.set_mesh``, as ``coevo_jax.models.sharded_forward``
    sets) and only on its Auto axes; otherwise a no-op. Without the pin GSPMD may keep
    activations replicated and shard the hidden axis instead, which is correct but moves far
    more data under FSDP.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    # Only Auto axes take a constraint. Inside shard_map the axes are Manual (each shard's
    # batch is already split); under Explicit axes the sharding is part of the array's type.
    types = zip(mesh.axis_names, mesh.axis_types, strict=True)
    auto = {n for n, t in types if t == jax.sharding.AxisType.Auto}
    kept, size = [], 1
    for name in ("data", "fsdp"):
        if name in auto and x.shape[0] % (size * mesh.shape[name]) == 0:
            kept.append(name)
            size *= mesh.shape[name]
    if size == 1:
        return x
    spec = jax.sharding.PartitionSpec(tuple(kept))
    return jax.lax.with_sharding_constraint(x, spec)


def _normalise_indices(hidden_layers: Sequence[int], num_layers: int) -> dict[int, int]:
    """Maps each requested index (negative allowed, as on HF's tuple) to 0..L."""
    out = {}
    for i in hidden_layers:
        j = int(i) + num_layers + 1 if int(i) < 0 else int(i)
        if not 0 <= j <= num_layers:
            raise ValueError(
                f"hidden layer index {i} out of range for {num_layers} layers (0..{num_layers})"
            )
        out[int(i)] = j
    return out


def forward(
    params: Params,
    cfg: ModelConfig,
    input_ids: jax.Array,
    attention_mask: jax.Array | None = None,
    positions: jax.Array | None = None,
    lora: tuple[LoRAWeights, jax.Array] | None = None,
    lora_rng: jax.Array | None = None,
    hidden_layers: Sequence[int] = (),
    stop_after_hidden: bool = False,
    cache: KVCache | None = None,
    cache_index: jax.Array | int | None = None,
    remat: bool | str = False,
    compute_dtype: Any = jnp.float32,
    matmul_dtype: Any = None,
    attention: str = "xla",
    attention_block: int = ATTENTION_BLOCK,
) -> DecoderOutput:
    """Runs the decoder on a (left-padded) batch.

    Args:
      params: the params pytree (``docs/interfaces.md``); any float dtype, cast per layer to
        ``compute_dtype``.
      cfg: the model config (static under ``jit``).
      input_ids: ``[B, T]`` int token ids.
      attention_mask: 1 = real token, 0 = pad (left padding). ``[B, T]`` without a cache,
        ``[B, S]`` (the whole cache's slots) with one. None = all real.
      positions: ``[B, T]`` int RoPE positions; default ``cumsum(mask) - 1`` clipped at 0 (taken
        at the new slots when a cache is given), so a left-padded row matches its unpadded self.
      lora: ``(LoRAWeights, agent_ids [B])``: each row adds its agent's adapter on the modules
        the weights carry; agent -1 leaves that row bit-exactly the base model.
      lora_rng: PRNG key that switches LoRA dropout on (training only).
      hidden_layers: HF ``hidden_states`` indices to return (static).
      stop_after_hidden: run only up to the deepest requested index; ``logits`` is None.
      cache: a ``KVCache``; the T new keys/values are written at ``cache_index``.
      cache_index: scalar slot of the first new token (same for every row).
      remat: wrap each block in ``jax.checkpoint`` (recompute activations in the backward):
        True or ``"full"`` keeps only the block's input, ``"dots"`` / ``"dots_no_batch"``
        also keep matmul outputs (``REMAT_POLICIES``), False or ``"none"`` no remat. Every
        choice gives the same values and gradients.
      compute_dtype: activations' dtype (bf16 or fp32); softmax and logits are fp32.
      matmul_dtype: operand dtype of the projection and LM-head matmuls (fp32 accumulation,
        see :func:`linear`); None = ``compute_dtype``. ``compute_dtype=float32,
        matmul_dtype=bfloat16`` is the fast CPU setting: bf16 GEMMs, fp32 elementwise work.
      attention: ``models.ops.ATTENTION_IMPLS``: ``"xla"`` (whole fp32 scores per query
        block), ``"blockwise"`` (one score tile at a time), ``"cudnn"`` (GPU), ``"auto"``
        (cuDNN on GPU, else blockwise); see ``models.ops.attention``. Equal up to fp32
        summation order on every query that sees a key.
      attention_block: ``"blockwise"``'s tile edge, in queries and keys.

    Returns:
      ``DecoderOutput``. Differentiable w.r.t. ``params`` and the LoRA weights.
    """
    chex.assert_rank(input_ids, 2)
    b, t = input_ids.shape
    n_layers = cfg.num_layers
    md = jnp.dtype(compute_dtype if matmul_dtype is None else matmul_dtype)
    wanted = _normalise_indices(hidden_layers, n_layers)
    if stop_after_hidden and not wanted:
        raise ValueError("stop_after_hidden=True needs at least one index in hidden_layers")
    depth = max(wanted.values()) if stop_after_hidden else n_layers
    impl = resolve_attention(attention)
    remat_name(remat)  # fail before tracing
    if cache is not None and cache_index is None:
        raise ValueError("a cache needs cache_index (the slot of the first new token)")

    # Slot bookkeeping: queries sit at slots q0..q0+T-1 of a key axis of length S.
    if cache is None:
        s_len, q0 = t, 0
    else:
        chex.assert_shape(cache.k, (n_layers, b, None, cfg.num_kv_heads, cfg.head_dim))
        s_len, q0 = cache.length, jnp.asarray(cache_index, jnp.int32)
    if attention_mask is None:
        key_mask = jnp.ones((b, s_len), bool)
        if positions is None:
            positions = jnp.broadcast_to(q0 + jnp.arange(t, dtype=jnp.int32), (b, t))
    else:
        chex.assert_shape(attention_mask, (b, s_len))
        key_mask = attention_mask.astype(bool)
        if positions is None:
            full = jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)
            positions = full if cache is None else jax.lax.dynamic_slice(full, (0, q0), (b, t))
    chex.assert_shape(positions, (b, t))

    q_slot = q0 + jnp.arange(t)[:, None]
    k_slot = jnp.arange(s_len)[None, :]
    allowed = k_slot <= q_slot
    if cfg.sliding_window is not None:
        allowed = allowed & (q_slot - k_slot < cfg.sliding_window)
    allowed = allowed[None] & key_mask[:, None, :]

    cos, sin = rope_cos_sin(cfg, positions)

    lora_params = None
    if lora is not None:
        weights, agent_ids = lora
        chex.assert_shape(agent_ids, (b,))
        lora_params = weights.params

    layers = params["layers"]

    def body(carry, xs):
        x, kv = carry
        lora_l, layer = xs
        # Read this layer's weights in place: slicing the stack outside the scan (for a partial
        # pass) would make XLA copy every weight of the segment on each call.
        norms = {
            k: jax.lax.dynamic_index_in_dim(a, layer, keepdims=False)
            for k, a in layers.items()
            if k in _NORMS
        }
        block_lora = None
        if lora is not None:
            rng = None if lora_rng is None else jax.random.fold_in(lora_rng, layer)
            block_lora = BlockLoRA(lora_l, agent_ids, weights.scale, weights.dropout, rng)
        inp = BlockInputs(layer, norms, layers, cos, sin, allowed, block_lora, kv, q0)
        x, kv = _block(cfg, x, inp, compute_dtype, md, impl, attention_block)
        return (batch_constraint(x), kv), None

    body = _rematerialised(body, remat)

    x = batch_constraint(embed_rows(params["embed"], input_ids).astype(compute_dtype))
    kv = cache
    found = {0: x}
    bounds = sorted({j for j in wanted.values() if 0 < j <= depth} | {depth})
    start = 0
    for end in bounds:
        if end > start:
            seg_lora = (
                None
                if lora_params is None
                else jax.tree.map(lambda a, s=start, e=end: a[s:e], lora_params)
            )
            xs = (seg_lora, jnp.arange(start, end, dtype=jnp.int32))
            (x, kv), _ = jax.lax.scan(body, (x, kv), xs)
        found[end] = x
        start = end

    final = None
    if depth == n_layers:
        final = rms_norm(x, params["final_norm"], cfg.rms_norm_eps)
        found[n_layers] = final
    hidden = {i: found[j] for i, j in wanted.items()}

    logits = None if stop_after_hidden else lm_head(params, cfg, final, md)
    return DecoderOutput(logits=logits, hidden_states=hidden, cache=kv)


def lm_head(params: Params, cfg: ModelConfig, h: jax.Array, dtype: Any) -> jax.Array:
    """fp32 logits ``[..., V]`` of final-normed hidden states ``h`` ``[..., H]``.

    The product takes ``h`` and the head (the embedding when tied) in ``dtype`` with fp32
    accumulation.
    """
    if cfg.tie_word_embeddings:
        w = params["embed"].astype(dtype)
        return jnp.einsum("...h,vh->...v", h.astype(dtype), w, preferred_element_type=jnp.float32)
    w = params["lm_head"].astype(dtype)
    return jnp.einsum("...h,hv->...v", h.astype(dtype), w, preferred_element_type=jnp.float32)


FORWARD_STATIC_ARGNAMES = (
    "cfg",
    "hidden_layers",
    "stop_after_hidden",
    "remat",
    "compute_dtype",
    "matmul_dtype",
    "attention",
    "attention_block",
)

jit_forward = jax.jit(forward, static_argnames=FORWARD_STATIC_ARGNAMES)
"""``forward`` under ``jax.jit`` with the config and switches static (``hidden_layers`` must be
a tuple so it is hashable)."""


def param_shapes(cfg: ModelConfig) -> Params:
    """The params pytree of ``cfg`` with shape tuples as leaves (the layout contract)."""
    n, h, d, inner, vocab = (
        cfg.num_layers,
        cfg.hidden_size,
        cfg.head_dim,
        cfg.intermediate_size,
        cfg.vocab_size,
    )
    layers = {
        "attn_norm": (n, h),
        "q": (n, h, cfg.num_heads * d),
        "k": (n, h, cfg.num_kv_heads * d),
        "v": (n, h, cfg.num_kv_heads * d),
        "o": (n, cfg.num_heads * d, h),
        "mlp_norm": (n, h),
        "gate": (n, h, inner),
        "up": (n, h, inner),
        "down": (n, inner, h),
    }
    if cfg.qk_norm:
        layers["q_norm"] = (n, d)
        layers["k_norm"] = (n, d)
    shapes: Params = {"embed": (vocab, h), "layers": layers, "final_norm": (h,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head"] = (h, vocab)
    return shapes


def cast_matrices(params: Params, dtype: Any) -> Params:
    """``params`` with the weight matrices (projections, embedding, LM head) cast to ``dtype``.

    Norm weights keep their dtype: they scale fp32 statistics and are not matmul operands.
    Used to store a frozen backbone in the matmul dtype once instead of casting it per call.
    """

    def cast(path, x):
        name = getattr(path[-1], "key", None)
        return x if name in _NORMS else x.astype(dtype)

    return jax.tree_util.tree_map_with_path(cast, params)


def init_params(
    cfg: ModelConfig, key: jax.Array, dtype: Any = jnp.float32, std: float = 0.02
) -> Params:
    """Random params (normal(0, std) matrices, unit norms), e.g. for tests and from-scratch runs."""
    return _init_params(cfg, key, jnp.dtype(dtype), float(std))


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _init_params(cfg: ModelConfig, key: jax.Array, dtype: Any, std: float) -> Params:
    # One compiled program per config, instead of one eager kernel compile per leaf shape.
    is_shape = lambda s: isinstance(s, tuple)  # noqa: E731
    flat, treedef = jax.tree_util.tree_flatten_with_path(param_shapes(cfg), is_leaf=is_shape)
    keys = jax.random.split(key, len(flat))
    out = []
    for (path, shape), k in zip(flat, keys, strict=True):
        if "norm" in jax.tree_util.keystr(path):
            out.append(jnp.ones(shape, dtype))
        else:
            out.append((std * jax.random.normal(k, shape, jnp.float32)).astype(dtype))
    return jax.tree.unflatten(treedef, out)


class Decoder(nnx.Module):
    """Flax NNX module over the params pytree; the math is ``forward``'s.

    ``model(input_ids, attention_mask=None, *, lora=None, **kw)`` returns a ``DecoderOutput``
    (``.logits`` ``[B, T, V]``). ``model.params`` is the plain pytree; ``model.config`` the
    ``ModelConfig``. Build one from a pytree with ``Decoder(cfg, params)`` or from random
    weights with ``Decoder.random(cfg, key)``.
    """

    def __init__(self, config: ModelConfig, params: Params):
        self.config = config
        self.embed = nnx.Param(params["embed"])
        self.layers = nnx.Dict({k: nnx.Param(v) for k, v in params["layers"].items()})
        self.final_norm = nnx.Param(params["final_norm"])
        self.lm_head = None if config.tie_word_embeddings else nnx.Param(params["lm_head"])

    @classmethod
    def random(cls, config: ModelConfig, key: jax.Array, dtype: Any = jnp.float32) -> Decoder:
        return cls(config, init_params(config, key, dtype))

    @property
    def params(self) -> Params:
        out: Params = {
            "embed": self.embed[...],
            "layers": {k: v[...] for k, v in self.layers.items()},
            "final_norm": self.final_norm[...],
        }
        if self.lm_head is not None:
            out["lm_head"] = self.lm_head[...]
        return out

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        *,
        lora: tuple[LoRAWeights, jax.Array] | None = None,
        **kwargs: Any,
    ) -> DecoderOutput:
        if "hidden_layers" in kwargs:
            kwargs["hidden_layers"] = tuple(kwargs["hidden_layers"])
        return jit_forward(
            self.params, self.config, jnp.asarray(input_ids), attention_mask, lora=lora, **kwargs
        )
