"""sequence_logprobs against the decoder's full logits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.models import forward
from coevo_jax.rl.logprobs import PolicyBatch, sequence_logprobs, token_logprobs

from ._tiny import CFG, random_batch, tiny_model


def _reference(params, lora, batch, agent_ids):
    ids = jnp.concatenate([batch.prompt_ids, batch.completion_ids], 1)
    mask = jnp.concatenate([batch.prompt_mask, batch.completion_mask], 1)
    out = forward(params, CFG, ids, attention_mask=mask, lora=(lora, agent_ids))
    p, t = batch.prompt_ids.shape[1], batch.completion_ids.shape[1]
    ls = jax.nn.log_softmax(out.logits[:, p - 1 : p - 1 + t], -1)
    lp = jnp.take_along_axis(ls, batch.completion_ids[..., None], -1)[..., 0]
    ent = -(jnp.exp(ls) * ls).sum(-1)
    return lp, ent


@pytest.mark.parametrize("chunk_size", [0, 4])
def test_matches_full_logits_per_agent(chunk_size):
    params, lora = tiny_model()
    batch = random_batch(0, [0, 3, -1, 1, 2, 0])
    lp, ent = jax.jit(
        lambda p, lo, b: sequence_logprobs(
            p, CFG, lo, b, compute_dtype=jnp.float32, chunk_size=chunk_size
        )
    )(params, lora, batch)
    ref_lp, ref_ent = map(np.asarray, jax.jit(_reference)(params, lora, batch, batch.agent_ids))
    m = np.asarray(batch.completion_mask, bool)
    np.testing.assert_allclose(np.asarray(lp)[m], ref_lp[m], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent)[m], ref_ent[m], rtol=1e-5, atol=1e-5)


def test_reference_is_adapter_off():
    params, lora = tiny_model()
    batch = random_batch(1, [0, 1, 2, 3])
    run = jax.jit(
        lambda p, lo, b, ids: sequence_logprobs(
            p, CFG, lo, b, agent_ids=ids, compute_dtype=jnp.float32
        )[0]
    )
    off = jax.jit(lambda p, b: sequence_logprobs(p, CFG, None, b, compute_dtype=jnp.float32)[0])(
        params, batch
    )
    minus = run(params, lora, batch, -jnp.ones(4, jnp.int32))
    np.testing.assert_array_equal(np.asarray(off), np.asarray(minus))
    on = run(params, lora, batch, batch.agent_ids)
    assert np.abs(np.asarray(on) - np.asarray(off)).max() > 1e-4


def test_chunked_gradient_matches_unchunked():
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.normal(size=(2, 7, 8)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(8, 11)), jnp.float32)
    tgt = jnp.asarray(rng.integers(0, 11, (2, 7)))
    f = lambda c: lambda h, w: token_logprobs(h, w, tgt, chunk_size=c)[0].sum()
    g0 = jax.jit(jax.grad(f(0), argnums=(0, 1)))(h, w)
    g3 = jax.jit(jax.grad(f(3), argnums=(0, 1)))(h, w)
    for a, b in zip(g0, g3, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("with_entropy", [True, False])
def test_hand_written_vjp_matches_autodiff(with_entropy):
    rng = np.random.default_rng(1)
    h = jnp.asarray(rng.normal(size=(3, 5, 8)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(8, 13)) * 3, jnp.float32)
    tgt = jnp.asarray(rng.integers(0, 13, (3, 5)))
    weights = jnp.asarray(rng.normal(size=(3, 5)), jnp.float32)

    def textbook(h, w):
        ls = jax.nn.log_softmax(h @ w, -1)
        return (jnp.take_along_axis(ls, tgt[..., None], -1)[..., 0] * weights).sum()

    def ours(h, w):
        lp, ent = token_logprobs(h, w, tgt, with_entropy=with_entropy)
        assert (ent is None) == (not with_entropy)
        return (lp * weights).sum()

    np.testing.assert_allclose(float(ours(h, w)), float(textbook(h, w)), rtol=1e-6)
    for a, b in zip(
        jax.jit(jax.grad(ours, argnums=(0, 1)))(h, w),
        jax.jit(jax.grad(textbook, argnums=(0, 1)))(h, w),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_entropy_is_a_metric_without_gradient():
    rng = np.random.default_rng(2)
    h = jnp.asarray(rng.normal(size=(2, 4, 8)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(8, 9)), jnp.float32)
    tgt = jnp.zeros((2, 4), jnp.int32)
    g = jax.grad(lambda h: token_logprobs(h, w, tgt)[1].sum())(h)
    np.testing.assert_array_equal(np.asarray(g), 0.0)


def test_batch_check_names_the_field():
    b = random_batch(0, [0, 1])
    bad = b.replace(advantages=jnp.zeros(3))
    with pytest.raises(ValueError, match="advantages"):
        bad.check()
    b.check()
    assert isinstance(b, PolicyBatch)


@pytest.mark.parametrize("vocab", [49152, 151936, 1000])
def test_exp_sums_fold_keeps_pairwise_precision(vocab):
    from coevo_jax.rl.logprobs import _exp_sums, _fold

    # SmolLM2's vocabulary folds to 384 lanes, Qwen's (128 x 1187) to 2374; 1000 is too small.
    assert _fold(vocab) == {49152: 384, 151936: 2374, 1000: 1}[vocab]
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 4, (2, 3, vocab)).astype(np.float32)
    m = logits.max(-1, keepdims=True)
    e = np.exp(logits.astype(np.float64) - m)
    for with_el in (True, False):
        s, s_el = jax.jit(_exp_sums, static_argnums=2)(jnp.asarray(logits), jnp.asarray(m), with_el)
        np.testing.assert_allclose(np.asarray(s), e.sum(-1), rtol=1e-6)
        if with_el:
            np.testing.assert_allclose(np.asarray(s_el), (e * logits).sum(-1), rtol=1e-6)
        else:
            assert s_el is None


def test_folded_vocabulary_matches_log_softmax():
    rng = np.random.default_rng(4)
    h = jnp.asarray(rng.normal(size=(2, 5, 16)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(16, 4608)), jnp.float32)  # folds to 384 lanes
    tgt = jnp.asarray(rng.integers(0, 4608, (2, 5)))
    lp, ent = jax.jit(lambda h, w: token_logprobs(h, w, tgt))(h, w)
    ls = jax.nn.log_softmax(h @ w, -1)
    want = jnp.take_along_axis(ls, tgt[..., None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(lp), np.asarray(want), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(ent), np.asarray(-(jnp.exp(ls) * ls).sum(-1)), rtol=1e-5, atol=1e-6
    )
    lp_ref, none = jax.jit(lambda h, w: token_logprobs(h, w, tgt, with_entropy=False))(h, w)
    assert none is None
    np.testing.assert_allclose(np.asarray(lp_ref), np.asarray(want), rtol=1e-6, atol=1e-6)
