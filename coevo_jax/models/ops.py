"""Matmul, attention and activation primitives of the decoder, with hand-written VJPs.

All exist for XLA:CPU speed or memory; none changes the math (figures in
`benchmarks/HISTORY.md`, policy step):

* :func:`linear`: the projection. 16-bit operands are multiplied with fp32 accumulation and
  fp32 output in the forward and in both input gradients (XLA:CPU runs bf16 x bf16 -> fp32
  dots at about twice its fp32 GEMM rate, but a bf16-output or mixed-operand dot slower than
  fp32), a frozen weight gets no gradient at all, and inside a layer scan the weight stack,
  not a per-layer slice, is the residual.
* :func:`attend`: GQA softmax attention whose backward recomputes the probabilities from
  ``q``, ``k`` and the saved row max and sum (FlashAttention's backward, unblocked)
  instead of keeping the ``[B, H, T, S]`` probabilities of every layer for the backward.
* :func:`attend_blockwise`: the same attention with the scores formed one ``[query block x
  key block]`` tile at a time under an online softmax (FlashAttention's schedule in plain
  XLA), so no ``[T, S]`` score matrix exists whole, forward or backward.
* :func:`attend_dpa`: ``jax.nn.dot_product_attention`` (cuDNN's fused kernel on GPU) with this
  module's mask semantics.
* :func:`silu_mul`: the gated MLP's ``silu(g) * u``, keeping only ``g`` and ``u``.
* :func:`embed_rows`: the embedding lookup, gathering a 16-bit table as raw words.

No library offers these for JAX on CPU, hence written here. :func:`attention` picks one of the
three attentions by name (``ATTENTION_IMPLS``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Masked attention scores get the most negative finite fp32 value rather than -inf, so a row
# with no visible key (a left-pad query) yields a finite uniform softmax instead of NaN.
MASK_VALUE = float(jnp.finfo(jnp.float32).min)


def _pick(w: jax.Array, index: jax.Array | None) -> jax.Array:
    if index is None:
        return w
    if w.dtype.itemsize == 2:
        # XLA:CPU widens a 16-bit dynamic slice to fp32: it converts the whole [L, ...]
        # stack to fp32 and every slice back. Slicing the raw 16-bit words avoids both.
        bits = jax.lax.bitcast_convert_type(w, jnp.uint16)
        picked = jax.lax.dynamic_index_in_dim(bits, index, keepdims=False)
        return jax.lax.bitcast_convert_type(picked, w.dtype)
    return jax.lax.dynamic_index_in_dim(w, index, keepdims=False)


@jax.custom_vjp
def embed_rows(table: jax.Array, ids: jax.Array) -> jax.Array:
    """``table[ids]``: rows of a ``[V, H]`` embedding for int ``ids`` ``[...]``, in its dtype.

    A 16-bit table is gathered as raw 16-bit words, for the reason :func:`_pick` gives:
    XLA:CPU would otherwise convert the whole table to fp32 on every call to gather a few
    rows. Differentiable w.r.t. ``table`` (the rows' cotangents summed per id, in fp32).
    """
    if table.dtype.itemsize != 2:
        return table[ids]
    rows = jax.lax.bitcast_convert_type(table, jnp.uint16)[ids]
    return jax.lax.bitcast_convert_type(rows, table.dtype)


def _embed_rows_fwd(table, ids):
    # The table itself is the residual (an input: no copy), for its shape and dtype.
    return embed_rows(table, ids), (table, ids)


def _embed_rows_bwd(res, g):
    table, ids = res
    d_table = jnp.zeros(table.shape, jnp.float32).at[ids].add(g.astype(jnp.float32))
    return d_table.astype(table.dtype), np.zeros(ids.shape, jax.dtypes.float0)


embed_rows.defvjp(_embed_rows_fwd, _embed_rows_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _mixed_dot(h: jax.Array, w: jax.Array, index: jax.Array | None, dtype: Any) -> jax.Array:
    """``h [..., in] @ w[index] [in, out]``, operands rounded to ``dtype``, fp32 accumulate/out."""
    return jnp.einsum(
        "...i,io->...o",
        h.astype(dtype),
        _pick(w, index).astype(dtype),
        preferred_element_type=jnp.float32,
    )


def _mixed_dot_fwd(h, w, index, dtype):
    # symbolic_zeros: a frozen weight arrives unperturbed. Its gradient is then not formed at
    # all and h is not kept for it (a 0-d placeholder carries h's dtype). Without this, JAX
    # instantiates a zero tangent for w, and inside the layer scan the cotangent of the
    # whole weight stack becomes a loop carry that XLA keeps updating.
    # The residual is the weight *stack* plus the index, not the slice: the stack is
    # loop-invariant, so the layer scan passes it through, whereas a slice would be copied
    # into a per-layer residual stack (a bf16 dynamic-update-slice, which XLA:CPU widens to
    # fp32 over the whole stacked buffer on every layer). h keeps its own dtype likewise.
    hv, wv, iv = h.value, w.value, index.value if index is not None else None
    y = _mixed_dot(hv, wv, iv, dtype)
    keep = hv if w.perturbed else jnp.zeros((), hv.dtype)
    return y, (keep, wv, iv)


def _mixed_dot_bwd(dtype, res, g):
    # Both input gradients are again 16-bit x 16-bit -> fp32 products. JAX's own transpose
    # would pair the fp32 cotangent with the 16-bit weight: a mixed dot that XLA:CPU runs
    # through its fp32 GEMM. Rounding g to the operand dtype is what bf16 autocast does.
    h, w, index = res
    if isinstance(g, jax.custom_derivatives.SymbolicZero):
        return None, None, None
    g = g.astype(dtype)
    w_i = _pick(w, index).astype(dtype)
    dh = jnp.einsum("...o,io->...i", g, w_i, preferred_element_type=jnp.float32)
    if h.ndim == 0:
        return dh.astype(h.dtype), None, None
    dw = jnp.einsum("...i,...o->io", h.astype(dtype), g, preferred_element_type=jnp.float32)
    if index is not None:
        dw = jax.lax.dynamic_update_index_in_dim(jnp.zeros(w.shape, jnp.float32), dw, index, 0)
    return dh.astype(h.dtype), dw.astype(w.dtype), None


_mixed_dot.defvjp(_mixed_dot_fwd, _mixed_dot_bwd, symbolic_zeros=True)


def linear(
    h: jax.Array, w: jax.Array, matmul_dtype: Any = None, *, index: jax.Array | None = None
) -> jax.Array:
    """``h @ w`` (or ``h @ w[index]`` for a stacked ``w``), returned in ``h``'s dtype.

    With fp32 operands (``h`` fp32 and ``matmul_dtype`` None or fp32) this is the plain
    product. Otherwise both operands are rounded to ``matmul_dtype`` (default ``h.dtype``)
    and multiplied with fp32 accumulation and fp32 output, rounded once to ``h.dtype``, in
    the forward and in both input gradients. XLA:CPU runs bf16 x bf16 -> fp32 dots on its
    AVX512-BF16 kernels at about twice its fp32 GEMM rate, while a dot with a bf16 *output*
    or mixed fp32/bf16 operands goes through slower paths (`benchmarks/HISTORY.md`).

    Args:
      h: ``[..., in]`` activations (float32 or a 16-bit float).
      w: ``[in, out]`` weight, or ``[L, in, out]`` with ``index``; any float dtype. Pass it
        already in ``matmul_dtype`` when it is reused: the cast here runs on every call.
      matmul_dtype: operand dtype of the product; None = ``h.dtype``.
      index: int32 scalar picking one matrix of a stacked ``w``. Inside a layer scan, pass
        the stack and the layer index rather than a slice: the backward then keeps the
        (loop-invariant) stack instead of a per-layer copy of every slice.

    Returns:
      ``[..., out]`` in ``h.dtype``. Differentiable w.r.t. ``h`` and ``w``.
    """
    md = jnp.dtype(h.dtype if matmul_dtype is None else matmul_dtype)
    # fp32 products go through the same VJP: autodiff of `h @ w[index]` would keep each
    # layer's weight slice as a residual, i.e. copy the whole stack per micro-batch.
    return _mixed_dot(h, w, index, md).astype(h.dtype)


def _masked(x: jax.Array, allowed: jax.Array, fill: float) -> jax.Array:
    """``x [B, nKV, T*G, S]`` with ``fill`` where ``allowed [B, T, S]`` is False."""
    b, n_kv, rows, s = x.shape
    t = allowed.shape[1]
    x = x.reshape(b, n_kv, t, rows // t, s)
    return jnp.where(allowed[:, None, :, None, :], x, fill).reshape(b, n_kv, rows, s)


def _scores(q: jax.Array, k: jax.Array, allowed: jax.Array) -> jax.Array:
    """Scaled, masked fp32 scores ``[B, nKV, T*G, S]`` (row ``t*G + g``: query t, group g)."""
    s = jnp.einsum("bkrd,bksd->bkrs", q, k, preferred_element_type=jnp.float32)
    return _masked(s * (q.shape[-1] ** -0.5), allowed, MASK_VALUE)


def _rows_t(x: jax.Array, y: jax.Array) -> jax.Array:
    """``y^T x`` over the row axis: ``x [B, K, R, D]``, ``y [B, K, R, S]`` -> fp32 ``[B, K, S, D]``."""
    out = jnp.einsum("bkrd,bkrs->bkds", x, y, preferred_element_type=jnp.float32)
    return jnp.swapaxes(out, 2, 3)


def _attention_grads(dqs, dks, dvs, q, k, v, allowed):
    """The custom VJPs' outputs from per-query-block pieces: ``dq`` joined along queries,
    ``dk``/``dv`` summed over the blocks' key prefixes, each in its input's dtype, and no
    gradient for the boolean mask."""
    dq = jnp.concatenate(dqs, axis=2)
    dk, dv = _sum_key_prefixes(dks), _sum_key_prefixes(dvs)
    d_allowed = np.zeros(allowed.shape, jax.dtypes.float0)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), d_allowed


def _sum_key_prefixes(parts: list[jax.Array]) -> jax.Array:
    """Sum of per-span key gradients ``[B, K, s1, D]``, each covering keys ``0..s1-1``.

    The last span always reaches every key (see :func:`attend`), so the others are added
    into it: no zero-filled accumulator.
    """
    total = parts[-1]
    for part in parts[:-1]:
        total = total.at[:, :, : part.shape[2]].add(part)
    return total


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attend_core(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    allowed: jax.Array,
    spans: tuple[tuple[int, int, int], ...],
) -> jax.Array:
    out, _ = _attend_fwd(q, k, v, allowed, spans)
    return out


def _attend_fwd(q, k, v, allowed, spans):
    # Each span (t0, t1, s1): queries t0..t1-1 against keys 0..s1-1. One span covering
    # everything is plain attention; causal spans skip the key blocks a query block cannot
    # see (all masked), as FlashAttention's causal kernels do.
    g = q.shape[2] // allowed.shape[1]
    outs, ms, dens = [], [], []
    for t0, t1, s1 in spans:
        s = _scores(q[:, :, t0 * g : t1 * g], k[:, :, :s1], allowed[:, t0:t1, :s1])
        m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
        e = jnp.exp(s - m)
        den = jnp.sum(e, axis=-1, keepdims=True)
        outs.append(jnp.einsum("bkrs,bksd->bkrd", (e / den).astype(v.dtype), v[:, :, :s1]))
        ms.append(m)
        dens.append(den)
    out, m, den = (jnp.concatenate(xs, axis=2) for xs in (outs, ms, dens))
    # The max and the sum, not m + log(den): for a query that sees no key, m is the mask
    # value and m + log(den) rounds back to m.
    return out, (q, k, v, allowed, m, den, out)


def _attend_bwd(spans, res, d_out):
    q, k, v, allowed, m, den, out = res
    f32 = jnp.float32
    g = q.shape[2] // allowed.shape[1]
    # softmax backward: ds = p * (dp - sum_s p dp). sum_s p dp equals d_out . out row by
    # row, a reduction over D instead of S (and XLA:CPU runs the product-and-reduce over
    # S as a slow fused YNNPACK reduction).
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1, keepdims=True)
    d_out = d_out.astype(v.dtype)
    dqs, dks, dvs = [], [], []
    for t0, t1, s1 in spans:
        rows = slice(t0 * g, t1 * g)
        qi, ki, vi, ai = q[:, :, rows], k[:, :, :s1], v[:, :, :s1], allowed[:, t0:t1, :s1]
        p = jnp.exp(_scores(qi, ki, ai) - m[:, :, rows]) / den[:, :, rows]
        do = d_out[:, :, rows]
        # dv and dk contract the query rows; XLA:CPU runs that product ~1.5x faster with the
        # [D, S] output (YNNPACK) than with [S, D] (Eigen), and the transpose is small.
        dvs.append(_rows_t(do, p.astype(v.dtype)))
        dp = jnp.einsum("bkrd,bksd->bkrs", do, vi, preferred_element_type=f32)
        ds = p * (dp - delta[:, :, rows]) * (q.shape[-1] ** -0.5)
        # A masked score is a constant: no gradient. This matters for a query that sees no
        # key (left padding), whose uniform p is nonzero on masked entries.
        ds = _masked(ds, ai, 0.0).astype(q.dtype)
        dqs.append(jnp.einsum("bkrs,bksd->bkrd", ds, ki, preferred_element_type=f32))
        dks.append(_rows_t(qi, ds))
    return _attention_grads(dqs, dks, dvs, q, k, v, allowed)


_attend_core.defvjp(_attend_fwd, _attend_bwd)


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    allowed: jax.Array,
    num_kv_heads: int,
    *,
    causal_blocks: int = 1,
) -> jax.Array:
    """Grouped-query softmax attention.

    Args:
      q: ``[B, T, nH, D]`` queries (compute dtype).
      k: ``[B, S, nKV, D]`` keys; ``nH`` a multiple of ``nKV = num_kv_heads``.
      v: ``[B, S, nKV, D]`` values.
      allowed: ``[B, T, S]`` bool, True where query t may attend key s. A row with no
        allowed key gets a uniform distribution (finite, never NaN).
      num_kv_heads: ``nKV``.
      causal_blocks: > 1 promises that ``allowed`` is causal with ``T == S`` (query t sees
        no key s > t) and splits the queries into that many blocks, each multiplied only
        with the keys up to its last query: the products skip all-masked blocks and do
        ``(n + 1) / 2n`` of the full work (62.5 % at 4). Rows with a visible key are
        unchanged up to summation order; a row that sees no key is uniform over its block's
        keys instead of all S.

    Returns:
      ``[B, T, nH * D]`` in ``v``'s dtype. Scores and softmax are fp32. Differentiable
      w.r.t. ``q``, ``k`` and ``v``; the backward keeps only ``q``, ``k``, ``v``, the output
      and the fp32 row max and row sum (``[B, nKV, T*G, 1]`` each) and recomputes the
      probabilities (one extra ``q k^T`` product) rather than storing ``[B, nH, T, S]`` per
      layer.
    """
    b, t, n_heads, d = q.shape
    s = k.shape[1]
    if causal_blocks > 1:
        if s != t:
            raise ValueError(f"causal_blocks needs as many keys as queries, got T={t}, S={s}")
        bounds = [round(i * t / causal_blocks) for i in range(causal_blocks + 1)]
        spans = tuple((t0, t1, t1) for t0, t1 in zip(bounds, bounds[1:], strict=False) if t1 > t0)
    else:
        spans = ((0, t, s),)
    qh, kh, vh = _head_major(q, k, v, num_kv_heads)
    return _token_major(_attend_core(qh, kh, vh, allowed, spans), t, num_kv_heads)


def _head_major(q, k, v, num_kv_heads):
    """``q [B, T, nH, D]`` -> ``[B, nKV, T*G, D]`` (row ``t*G + g``), ``k, v`` -> ``[B, nKV, S, D]``.

    Head-major layout around the attention cores: the score tensor then comes out of its
    products row-major with S last, so neither it nor its gradient is ever transposed; only
    the small q, k, v and output tensors are (`benchmarks/HISTORY.md`).
    """
    b, t, n_heads, d = q.shape
    g = n_heads // num_kv_heads
    qh = q.reshape(b, t, num_kv_heads, g, d).transpose(0, 2, 1, 3, 4)
    return qh.reshape(b, num_kv_heads, t * g, d), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def _token_major(out: jax.Array, t: int, num_kv_heads: int) -> jax.Array:
    """Inverse of :func:`_head_major` on the output: ``[B, nKV, T*G, D]`` -> ``[B, T, nH*D]``."""
    b, _, rows, d = out.shape
    g = rows // t
    out = out.reshape(b, num_kv_heads, t, g, d).transpose(0, 2, 1, 3, 4)
    return out.reshape(b, t, num_kv_heads * g * d)


# Tile edge of `attend_blockwise`, in query tokens and in keys. One fp32 score tile is
# [B, nKV, 512 G, 512]; larger tiles run fewer, bigger products, smaller ones bound memory.
ATTENTION_BLOCK = 512

ATTENTION_IMPLS = ("xla", "blockwise", "cudnn", "auto")


def _split_keys(x: jax.Array, s1: int, bk: int) -> jax.Array:
    """Slots ``0..s1-1`` of axis 2 of ``x`` (``[B, K, S, D]`` keys or ``[B, T, S]`` mask),
    zero/False-padded to ``n * bk`` and split into ``[n, ..., bk, ...]`` key blocks (the
    leading axis is the scan's)."""
    n = -(-s1 // bk)
    x = x[:, :, :s1]
    if n * bk > s1:
        x = jnp.pad(x, ((0, 0), (0, 0), (0, n * bk - s1)) + ((0, 0),) * (x.ndim - 3))
    return jnp.moveaxis(x.reshape(*x.shape[:2], n, bk, *x.shape[3:]), 2, 0)


def _join_keys(x: jax.Array, s1: int) -> jax.Array:
    """Inverse of :func:`_split_keys` on ``[n, B, K, bk, D]``: ``[B, K, s1, D]``."""
    n, b, k, bk, d = x.shape
    return jnp.moveaxis(x, 0, 2).reshape(b, k, n * bk, d)[:, :, :s1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _blockwise_core(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    allowed: jax.Array,
    spans: tuple[tuple[int, int, int], ...],
    bk: int,
) -> jax.Array:
    out, _ = _blockwise_fwd(q, k, v, allowed, spans, bk)
    return out


def _blockwise_fwd(q, k, v, allowed, spans, bk):
    # Per query span (t0, t1, s1): a scan over key blocks of 0..s1-1 carrying the running row
    # max m, row sum den and unnormalised output acc (online softmax). m starts at the mask
    # value, not -inf: a tile with no visible key then gives exp(0) = 1 terms that the first
    # visible key's rescale exp(MASK_VALUE - m) wipes out, and a row that never sees a key
    # stays finite (uniform over its tiles' keys).
    f32 = jnp.float32
    b, n_kv, _, d = q.shape
    g = q.shape[2] // allowed.shape[1]
    outs, ms, dens = [], [], []
    for t0, t1, s1 in spans:
        qi = q[:, :, t0 * g : t1 * g]
        rows = qi.shape[2]
        xs = (
            _split_keys(k, s1, bk),
            _split_keys(v, s1, bk),
            _split_keys(allowed[:, t0:t1], s1, bk),
        )

        def body(carry, x, qi=qi):
            m, den, acc = carry
            kj, vj, aj = x
            s = _scores(qi, kj, aj)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
            corr = jnp.exp(m - m_new)
            e = jnp.exp(s - m_new)
            den = den * corr + jnp.sum(e, axis=-1, keepdims=True)
            pv = jnp.einsum("bkrs,bksd->bkrd", e.astype(v.dtype), vj, preferred_element_type=f32)
            return (m_new, den, acc * corr + pv), None

        init = (
            jnp.full((b, n_kv, rows, 1), MASK_VALUE, f32),
            jnp.zeros((b, n_kv, rows, 1), f32),
            jnp.zeros((b, n_kv, rows, d), f32),
        )
        (m, den, acc), _ = jax.lax.scan(body, init, xs)
        outs.append((acc / den).astype(v.dtype))
        ms.append(m)
        dens.append(den)
    out, m, den = (jnp.concatenate(xs, axis=2) for xs in (outs, ms, dens))
    return out, (q, k, v, allowed, m, den, out)


def _blockwise_bwd(spans, bk, res, d_out):
    # :func:`_attend_bwd` tile by tile: each key block's probabilities are recomputed from
    # the saved row max and sum; dq is carried over the key blocks, dk and dv come out per
    # block and are summed over the query spans.
    q, k, v, allowed, m, den, out = res
    f32 = jnp.float32
    g = q.shape[2] // allowed.shape[1]
    scale = q.shape[-1] ** -0.5
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1, keepdims=True)
    d_out = d_out.astype(v.dtype)
    dqs, dks, dvs = [], [], []
    for t0, t1, s1 in spans:
        rows = slice(t0 * g, t1 * g)
        qi, do, mi, deni, di = (
            q[:, :, rows],
            d_out[:, :, rows],
            m[:, :, rows],
            den[:, :, rows],
            delta[:, :, rows],
        )
        xs = (
            _split_keys(k, s1, bk),
            _split_keys(v, s1, bk),
            _split_keys(allowed[:, t0:t1], s1, bk),
        )

        def body(dq, x, qi=qi, do=do, mi=mi, deni=deni, di=di):
            kj, vj, aj = x
            p = jnp.exp(_scores(qi, kj, aj) - mi) / deni
            dv_j = _rows_t(do, p.astype(v.dtype))
            dp = jnp.einsum("bkrd,bksd->bkrs", do, vj, preferred_element_type=f32)
            ds = _masked(p * (dp - di) * scale, aj, 0.0).astype(q.dtype)
            dq = dq + jnp.einsum("bkrs,bksd->bkrd", ds, kj, preferred_element_type=f32)
            return dq, (_rows_t(qi, ds), dv_j)

        dq, (dk_b, dv_b) = jax.lax.scan(body, jnp.zeros(qi.shape, f32), xs)
        dqs.append(dq)
        dks.append(_join_keys(dk_b, s1))
        dvs.append(_join_keys(dv_b, s1))
    return _attention_grads(dqs, dks, dvs, q, k, v, allowed)


_blockwise_core.defvjp(_blockwise_fwd, _blockwise_bwd)


def attend_blockwise(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    allowed: jax.Array,
    num_kv_heads: int,
    *,
    causal: bool = False,
    block_size: int = ATTENTION_BLOCK,
) -> jax.Array:
    """:func:`attend` with memory bounded by one ``block_size x block_size`` score tile.

    Queries are cut into blocks of ``block_size`` tokens and each block scans the keys in
    blocks of ``block_size`` under an online softmax; the backward recomputes each tile's
    probabilities from the saved fp32 row max and sum. Live scores are one fp32 tile
    ``[B, nKV, block_size * G, block_size]`` instead of ``[B, nKV, T * G, S]``.

    Args:
      q, k, v, allowed, num_kv_heads: as :func:`attend`.
      causal: promises ``allowed`` is causal with ``T == S``; each query block then scans
        only the key blocks up to its last query.
      block_size: tile edge in query tokens and in keys (> 0).

    Returns:
      ``[B, T, nH * D]`` in ``v``'s dtype, equal to :func:`attend` up to fp32 summation order
      on every row that sees a key (scores and softmax fp32). A row that sees no key is
      finite (uniform over the keys of its tiles), as in :func:`attend`, but not the same
      row. Differentiable w.r.t. ``q``, ``k`` and ``v``.
    """
    b, t, n_heads, d = q.shape
    s = k.shape[1]
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if causal and s != t:
        raise ValueError(f"causal needs as many keys as queries, got T={t}, S={s}")
    bounds = list(range(0, t, block_size)) + [t]
    spans = tuple((t0, t1, t1 if causal else s) for t0, t1 in zip(bounds, bounds[1:], strict=False))
    qh, kh, vh = _head_major(q, k, v, num_kv_heads)
    out = _blockwise_core(qh, kh, vh, allowed, spans, min(block_size, s))
    return _token_major(out, t, num_kv_heads)


def attend_dpa(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    allowed: jax.Array,
    *,
    implementation: str = "cudnn",
) -> jax.Array:
    """:func:`attend` through ``jax.nn.dot_product_attention`` (``"cudnn"``: its fused GPU
    kernel; ``"xla"``: its reference lowering, for tests off GPU).

    ``allowed`` enters as the boolean mask (cuDNN turns it into an additive bias
    ``[B, 1, T, S]``; left-padded prompts rule out its sequence-length masks). A row with no
    visible key is given key slot 0 instead, so that no kernel ever normalises an empty
    row: such rows (left padding) are never read by a real row, but a NaN there would reach
    real rows through ``0 * NaN`` in the next layer's products.

    Args:
      q, k, v, allowed: as :func:`attend` (GQA from the head counts of ``q`` and ``k``).
      implementation: ``"cudnn"`` or ``"xla"``; cuDNN needs a GPU and 16-bit ``q, k, v``.

    Returns:
      ``[B, T, nH * D]`` in ``q``'s dtype, equal to :func:`attend` up to summation order on
      every row that sees a key. Differentiable w.r.t. ``q``, ``k`` and ``v``.
    """
    b, t, n_heads, d = q.shape
    blind = ~jnp.any(allowed, axis=-1)  # [B, T]
    allowed = allowed.at[:, :, 0].set(allowed[:, :, 0] | blind)
    out = jax.nn.dot_product_attention(
        q, k, v, mask=allowed[:, None], implementation=implementation
    )
    return out.reshape(b, t, n_heads * d)


def resolve_attention(impl: str) -> str:
    """``impl`` with ``"auto"`` resolved: ``"cudnn"`` on a GPU backend, else ``"blockwise"``."""
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {impl!r}")
    if impl == "auto":
        return "cudnn" if jax.default_backend() == "gpu" else "blockwise"
    return impl


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    allowed: jax.Array,
    num_kv_heads: int,
    *,
    impl: str = "xla",
    causal_blocks: int = 1,
    block_size: int = ATTENTION_BLOCK,
) -> jax.Array:
    """The attention named by ``impl`` (one of ``ATTENTION_IMPLS``), same arguments and result
    as :func:`attend`.

    ``"xla"``: :func:`attend` (whole fp32 scores per query block). ``"blockwise"``:
    :func:`attend_blockwise`. ``"cudnn"``: :func:`attend_dpa` on cuDNN. ``"auto"``: cuDNN on
    a GPU backend, else blockwise. ``causal_blocks > 1`` promises a causal ``allowed`` with
    ``T == S``: ``attend`` splits its queries into that many blocks, ``attend_blockwise``
    skips the key blocks after each query block. ``block_size``: blockwise's tile edge.
    """
    impl = resolve_attention(impl)
    if impl == "xla":
        return attend(q, k, v, allowed, num_kv_heads, causal_blocks=causal_blocks)
    if impl == "blockwise":
        return attend_blockwise(
            q, k, v, allowed, num_kv_heads, causal=causal_blocks > 1, block_size=block_size
        )
    return attend_dpa(q, k, v, allowed, implementation="cudnn")


@jax.custom_vjp
def silu_mul(g: jax.Array, u: jax.Array) -> jax.Array:
    """The gated MLP's ``silu(g) * u`` (same shapes and dtype), differentiable in both.

    The backward keeps only ``g`` and ``u`` and recomputes ``sigmoid(g)``. JAX's own VJP
    keeps ``sigmoid(g)`` and ``silu(g)`` beside them: two more ``[B, T, intermediate]``
    tensors per layer, the widest activations of the block.
    """
    return jax.nn.silu(g) * u


def _silu_mul_fwd(g, u):
    return silu_mul(g, u), (g, u)


def _silu_mul_bwd(res, d):
    g, u = res
    s = jax.nn.sigmoid(g)
    # d silu(g) / dg = s + g s (1 - s)
    return d * u * (s * (1 + g * (1 - s))), d * (g * s)


silu_mul.defvjp(_silu_mul_fwd, _silu_mul_bwd)
