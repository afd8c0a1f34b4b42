"""The decoder's matmul and attention primitives (``coevo_jax.models.ops``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import jaxprs_in_params

from coevo_jax.models.ops import (
    MASK_VALUE,
    attend,
    attend_blockwise,
    attend_dpa,
    attention,
    embed_rows,
    linear,
    resolve_attention,
    silu_mul,
)


def _rounded(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)


def test_linear_bf16_matches_rounded_operands_forward_and_backward():
    """Forward and both gradients are the products of bf16-rounded operands (and cotangent)."""
    k = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(k[0], (2, 5, 8))
    w = jax.random.normal(k[1], (8, 6))
    g = jax.random.normal(k[2], (2, 5, 6))
    y, vjp = jax.vjp(lambda h, w: linear(h, w, jnp.bfloat16), h, w)
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(y, _rounded(h) @ _rounded(w), rtol=1e-6, atol=1e-6)
    dh, dw = vjp(g)
    np.testing.assert_allclose(dh, _rounded(g) @ _rounded(w).T, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        dw, jnp.einsum("bti,bto->io", _rounded(h), _rounded(g)), rtol=1e-6, atol=1e-5
    )
    # bf16 activations: result and input gradient stay bf16
    hb = h.astype(jnp.bfloat16)
    assert linear(hb, w).dtype == jnp.bfloat16
    assert jax.grad(lambda h: jnp.sum(linear(h, w).astype(jnp.float32)))(hb).dtype == jnp.bfloat16


@pytest.mark.parametrize("matmul_dtype", [None, jnp.bfloat16])
def test_linear_on_a_stack_equals_the_slice_and_grads_only_that_slice(matmul_dtype):
    k = jax.random.split(jax.random.key(1), 2)
    h = jax.random.normal(k[0], (3, 8))
    ws = jax.random.normal(k[1], (4, 8, 6))
    i = jnp.int32(2)
    np.testing.assert_array_equal(
        linear(h, ws, matmul_dtype, index=i), linear(h, ws[2], matmul_dtype)
    )
    dws = jax.grad(lambda ws: jnp.sum(linear(h, ws, matmul_dtype, index=i)))(ws)
    dw = jax.grad(lambda w: jnp.sum(linear(h, w, matmul_dtype)))(ws[2])
    np.testing.assert_array_equal(dws[2], dw)
    assert float(jnp.abs(dws[jnp.array([0, 1, 3])]).max()) == 0.0


def test_frozen_bf16_weights_form_no_weight_gradient_in_the_layer_scan():
    """Differentiating w.r.t. activations only must not build weight-shaped products."""
    ws = jnp.ones((3, 8, 8), jnp.bfloat16)

    def f(h):
        def body(h, i):
            return jnp.tanh(linear(h, ws, index=i)), None

        return jnp.sum(jax.lax.scan(body, h, jnp.arange(3))[0].astype(jnp.float32))

    jaxpr = jax.make_jaxpr(jax.grad(f))(jnp.ones((5, 8), jnp.bfloat16))

    def dot_shapes(jx):
        for eqn in jx.eqns:
            if eqn.primitive.name == "dot_general":
                yield tuple(eqn.outvars[0].aval.shape)
            for sub in jaxprs_in_params(eqn.params):
                yield from dot_shapes(sub)

    shapes = list(dot_shapes(jaxpr.jaxpr))
    assert (5, 8) in shapes  # forward / input-gradient products are there
    assert (8, 8) not in shapes  # no weight gradient


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_layer_scan_keeps_no_copy_of_the_weight_slices(dtype):
    """The backward reads the loop-invariant stack; autodiff of ``h @ ws[i]`` would save
    every layer's slice, i.e. a per-call copy of the whole stack."""
    ws = jnp.ones((4, 8, 6), dtype)  # 4 layers, 3 scanned: a slice stack would be (3, 8, 6)

    def f(h):
        def body(h, i):
            return jnp.tanh(linear(h, ws, index=i) @ jnp.ones((6, 8), dtype)), None

        return jnp.sum(jax.lax.scan(body, h, jnp.arange(3))[0].astype(jnp.float32))

    _, res = jax.linearize(f, jnp.ones((5, 8), dtype))
    shapes = [getattr(r, "shape", None) for r in jax.tree.leaves(res)]
    assert (3, 8, 6) not in shapes
    assert (3, 5, 8) in shapes  # the per-layer inputs are kept, as they must be


def _reference_attention(q, k, v, allowed, n_kv):
    """Textbook GQA attention: repeat k/v per group, masked softmax, autodiff backward."""
    g = q.shape[2] // n_kv
    kr, vr = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
    s = jnp.einsum("bthd,bshd->bhts", q, kr) * q.shape[-1] ** -0.5
    s = jnp.where(allowed[:, None], s, MASK_VALUE)
    out = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, axis=-1), vr)
    return out.reshape(*q.shape[:2], -1)


def _attention_inputs(seed=0, b=2, t=5, s=7, n_heads=4, n_kv=2, d=8):
    k = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(k[0], (b, t, n_heads, d))
    kk = jax.random.normal(k[1], (b, s, n_kv, d))
    v = jax.random.normal(k[2], (b, s, n_kv, d))
    allowed = jax.random.bernoulli(k[3], 0.7, (b, t, s))
    allowed = allowed.at[0, 0].set(False)  # a query that sees no key (left padding)
    return q, kk, v, allowed, n_kv


def test_attend_matches_textbook_attention_values_and_gradients():
    q, k, v, allowed, n_kv = _attention_inputs()
    g = jax.random.normal(jax.random.key(9), (q.shape[0], q.shape[1], q.shape[2] * q.shape[3]))
    out, vjp = jax.vjp(lambda q, k, v: attend(q, k, v, allowed, n_kv), q, k, v)
    ref, ref_vjp = jax.vjp(lambda q, k, v: _reference_attention(q, k, v, allowed, n_kv), q, k, v)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(vjp(g), ref_vjp(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the blind query: uniform over all keys, finite gradients
    np.testing.assert_allclose(out[0, 0], ref[0, 0], rtol=1e-5, atol=1e-6)
    assert all(bool(jnp.isfinite(x).all()) for x in vjp(g))


def test_attend_bf16_is_close_and_keeps_dtypes():
    q, k, v, allowed, n_kv = _attention_inputs(1)
    ref = _reference_attention(q, k, v, allowed, n_kv)
    qb, kb, vb = (x.astype(jnp.bfloat16) for x in (q, k, v))
    out = attend(qb, kb, vb, allowed, n_kv)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=0.05)
    grads = jax.grad(lambda q, k, v: jnp.sum(attend(q, k, v, allowed, n_kv)), (0, 1, 2))(qb, kb, vb)
    assert [x.dtype for x in grads] == [jnp.bfloat16] * 3


@pytest.mark.parametrize("blocks", [2, 3, 16])
def test_causal_blocks_match_full_attention(blocks):
    """Query blocks that skip the keys after them equal full causal attention (values and
    gradients) on every row that sees a key; row 0 of batch 1 is left padding."""
    q, k, v, _, n_kv = _attention_inputs(3, t=16, s=16)
    causal = jnp.tril(jnp.ones((16, 16), bool))
    pad = jnp.arange(16)[None, :] >= jnp.array([[0], [3]])  # batch 1: 3 pad slots
    allowed = causal[None] & pad[:, None, :]
    seen = np.asarray(allowed.any(-1))  # [B, T] rows with a visible key
    g = jax.random.normal(jax.random.key(8), (2, 16, q.shape[2] * q.shape[3])) * seen[..., None]
    full = lambda q, k, v: attend(q, k, v, allowed, n_kv)
    part = lambda q, k, v: attend(q, k, v, allowed, n_kv, causal_blocks=blocks)
    out, vjp = jax.vjp(part, q, k, v)
    ref, ref_vjp = jax.vjp(full, q, k, v)
    np.testing.assert_allclose(np.asarray(out)[seen], np.asarray(ref)[seen], rtol=1e-5, atol=1e-6)
    for a, b in zip(vjp(g), ref_vjp(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="as many keys as queries"):
        attend(q[:, :8], k, v, allowed[:, :8], n_kv, causal_blocks=2)


@pytest.mark.parametrize("remat", [False, True])
def test_attend_saves_no_probabilities_for_the_backward(remat):
    """Residuals of a layer scan hold q, k, v and row statistics, not [B, H, T, S]."""
    q, k, v, allowed, n_kv = _attention_inputs(2, t=16, s=16)

    def f(q):
        def body(x, _):
            return attend(x.reshape(q.shape), k, v, allowed, n_kv).reshape(q.shape), None

        body = jax.checkpoint(body) if remat else body
        return jnp.sum(jax.lax.scan(body, q, None, length=3)[0])

    _, res = jax.linearize(f, q)
    shapes = {tuple(x.shape) for x in jax.tree.leaves(res) if hasattr(x, "shape")}
    # a stack of per-layer probabilities would be [3, 2, nKV, G, 16, 16] (>= 3 * 2 * 4 * 256)
    assert not any(s[-2:] == (16, 16) and np.prod(s) >= 3 * 2 * 4 * 256 for s in shapes), shapes


def _padded_causal(t, n_pad=3):
    """``[2, t, t]`` causal mask, batch 1 left-padded by ``n_pad`` (its first rows see no key)."""
    causal = jnp.tril(jnp.ones((t, t), bool))
    pad = jnp.arange(t)[None, :] >= jnp.array([[0], [n_pad]])
    return causal[None] & pad[:, None, :]


@pytest.mark.parametrize("block", [1, 4, 5, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_attention_equals_attend(block, causal):
    """Values and gradients equal :func:`attend`'s up to fp32 summation order on every row
    that sees a key, for tiles that divide T, do not, or hold all of it; blind rows finite."""
    q, k, v, _, n_kv = _attention_inputs(4, t=13, s=13)
    allowed = _padded_causal(13)
    seen = np.asarray(allowed.any(-1))
    g = jax.random.normal(jax.random.key(7), (2, 13, q.shape[2] * q.shape[3])) * seen[..., None]
    blocked = lambda q, k, v: attend_blockwise(
        q, k, v, allowed, n_kv, causal=causal, block_size=block
    )
    out, vjp = jax.vjp(blocked, q, k, v)
    ref, ref_vjp = jax.vjp(lambda q, k, v: attend(q, k, v, allowed, n_kv, causal_blocks=4), q, k, v)
    np.testing.assert_allclose(np.asarray(out)[seen], np.asarray(ref)[seen], rtol=1e-5, atol=1e-6)
    for a, b in zip(vjp(g), ref_vjp(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert bool(jnp.isfinite(out).all())
    assert all(bool(jnp.isfinite(x).all()) for x in vjp(jnp.ones_like(g)))


def test_blockwise_attention_with_more_keys_than_queries_and_bf16():
    """A cache-shaped call (T < S, arbitrary mask) in fp32, and bf16 dtypes kept."""
    q, k, v, allowed, n_kv = _attention_inputs(5, t=5, s=11)
    ref = attend(q, k, v, allowed, n_kv)
    seen = np.asarray(allowed.any(-1))
    out = attend_blockwise(q, k, v, allowed, n_kv, block_size=4)
    np.testing.assert_allclose(np.asarray(out)[seen], np.asarray(ref)[seen], rtol=1e-5, atol=1e-6)
    qb, kb, vb = (x.astype(jnp.bfloat16) for x in (q, k, v))
    out = attend_blockwise(qb, kb, vb, allowed, n_kv, block_size=4)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32)[seen], np.asarray(ref)[seen], atol=0.05)
    f = lambda q, k, v: jnp.sum(attend_blockwise(q, k, v, allowed, n_kv, block_size=4))
    assert [x.dtype for x in jax.grad(f, (0, 1, 2))(qb, kb, vb)] == [jnp.bfloat16] * 3
    with pytest.raises(ValueError, match="as many keys as queries"):
        attend_blockwise(q, k, v, allowed, n_kv, causal=True)


def test_blockwise_attention_keeps_no_score_matrix_for_the_backward():
    """Residuals hold q, k, v, the output and row statistics; no [T, S] scores, and no tile."""
    q, k, v, _, n_kv = _attention_inputs(2, t=16, s=16)
    allowed = _padded_causal(16)
    f = lambda q: jnp.sum(attend_blockwise(q, k, v, allowed, n_kv, causal=True, block_size=4))
    _, res = jax.linearize(f, q)
    floats = [
        x for x in jax.tree.leaves(res) if jnp.issubdtype(getattr(x, "dtype", None), jnp.floating)
    ]
    shapes = {tuple(x.shape) for x in floats}
    # q/out [2, nKV, 32, D=8], k/v [2, nKV, 16, 8], row max/sum [2, nKV, 32, 1]: no key axis.
    assert not any(s[-1] in (4, 16) for s in shapes), shapes


def test_dpa_attention_equals_attend_on_seen_rows():
    """``jax.nn.dot_product_attention`` (its XLA lowering here; cuDNN on GPU) under this
    module's mask: GQA grouping and padding as :func:`attend`; blind rows finite."""
    q, k, v, _, n_kv = _attention_inputs(6, t=9, s=9)
    allowed = _padded_causal(9)
    seen = np.asarray(allowed.any(-1))
    g = jax.random.normal(jax.random.key(3), (2, 9, q.shape[2] * q.shape[3])) * seen[..., None]
    out, vjp = jax.vjp(lambda q, k, v: attend_dpa(q, k, v, allowed, implementation="xla"), q, k, v)
    ref, ref_vjp = jax.vjp(lambda q, k, v: attend(q, k, v, allowed, n_kv), q, k, v)
    np.testing.assert_allclose(np.asarray(out)[seen], np.asarray(ref)[seen], rtol=1e-5, atol=1e-6)
    for a, b in zip(vjp(g), ref_vjp(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert bool(jnp.isfinite(out).all())


def test_attention_dispatch():
    q, k, v, _, n_kv = _attention_inputs(7, t=8, s=8)
    allowed = _padded_causal(8)
    ref = attend(q, k, v, allowed, n_kv, causal_blocks=2)
    np.testing.assert_array_equal(attention(q, k, v, allowed, n_kv, causal_blocks=2), ref)
    if jax.default_backend() != "gpu":
        assert resolve_attention("auto") == "blockwise"
    blocked = attention(q, k, v, allowed, n_kv, impl="blockwise", causal_blocks=2, block_size=3)
    seen = np.asarray(allowed.any(-1))
    np.testing.assert_allclose(np.asarray(blocked)[seen], np.asarray(ref)[seen], atol=1e-6)
    with pytest.raises(ValueError, match="attention must be one of"):
        resolve_attention("flash")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_silu_mul_value_and_gradients_match_autodiff(dtype):
    k = jax.random.split(jax.random.key(3), 3)
    g, u, d = (jax.random.normal(ki, (2, 7, 12), dtype) * 3 for ki in k)
    y, vjp = jax.vjp(silu_mul, g, u)
    y_ref, vjp_ref = jax.vjp(lambda g, u: jax.nn.silu(g) * u, g, u)
    tol = 1e-6 if dtype == jnp.float32 else 2e-2
    assert y.dtype == dtype
    np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(y_ref, np.float32), rtol=tol)
    for got, want in zip(vjp(d), vjp_ref(d), strict=True):
        assert got.dtype == dtype
        np.testing.assert_allclose(
            np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol
        )


def test_silu_mul_keeps_only_its_inputs_for_the_backward():
    def f(x):
        body = lambda c, _: (silu_mul(c, jnp.sin(c)), None)
        return jnp.sum(jax.lax.scan(body, x, None, length=3)[0])

    _, res = jax.linearize(f, jnp.ones((2, 5)))
    stacks = [r for r in jax.tree.leaves(res) if getattr(r, "shape", None) == (3, 2, 5)]
    # c and sin(c) for silu_mul, cos(c) for sin; autodiff of silu(g) * u keeps 5
    assert len(stacks) == 3


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_embed_rows_equals_indexing_bit_for_bit(dtype):
    table = jax.random.normal(jax.random.key(4), (50, 8)).astype(dtype)
    ids = jnp.array([[0, 49, 3], [7, 7, 1]])
    got = jax.jit(embed_rows)(table, ids)
    assert got.dtype == dtype and got.shape == (2, 3, 8)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(table[ids], np.float32))


def test_embed_rows_gradient_sums_the_rows_cotangents():
    table = jax.random.normal(jax.random.key(5), (6, 4)).astype(jnp.bfloat16)
    ids = jnp.array([[1, 1, 5]])
    g = jax.random.normal(jax.random.key(6), (1, 3, 4)).astype(jnp.bfloat16)
    got = jax.vjp(embed_rows, table, ids)[1](g)[0]
    want = jax.vjp(lambda t: t[ids], table)[1](g)[0]
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=1e-2)
    assert float(jnp.abs(got[1].astype(jnp.float32)).sum()) > 0
    np.testing.assert_array_equal(np.asarray(got[0], np.float32), 0.0)
