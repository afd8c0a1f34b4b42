import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.models import init_params
from coevo_jax.router.features import (
    feature_layers,
    features,
    left_truncate,
    pad_queries,
    standardization,
    standardize,
)
from tests.helpers import tiny_model_config

TINY = tiny_model_config("llama", vocab_size=61, intermediate_size=48, num_layers=6)


def test_feature_layer_indices():
    assert feature_layers(30, "mid") == (15, 22)  # SmolLM2
    assert feature_layers(36, "mid") == (18, 27)  # Qwen3-4B
    assert feature_layers(6, "final") == (6,)
    with pytest.raises(ValueError):
        feature_layers(6, "last")


def test_left_truncate_keeps_last_tokens_for_either_padding():
    ids = jnp.array([[0, 0, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 0, 0, 0, 0]])
    mask = jnp.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    out_ids, out_mask = left_truncate(ids, mask, 3)
    np.testing.assert_array_equal(np.asarray(out_ids), [[4, 5, 6], [10, 11, 12], [0, 13, 14]])
    np.testing.assert_array_equal(np.asarray(out_mask), [[1, 1, 1], [1, 1, 1], [0, 1, 1]])
    # Left-padded and short enough: unchanged.
    same_ids, same_mask = left_truncate(ids[:2], mask[:2], 800)
    np.testing.assert_array_equal(np.asarray(same_ids), np.asarray(ids[:2]))
    np.testing.assert_array_equal(np.asarray(same_mask), np.asarray(mask[:2]))


def test_pad_queries_truncates_pads_left_and_buckets():
    ids, mask = pad_queries([[1, 2, 3], list(range(10, 30))], max_len=16, pad_id=0, bucket=8)
    assert ids.shape == (2, 16) and ids.dtype == np.int32
    np.testing.assert_array_equal(ids[1], np.arange(14, 30))  # the last 16 tokens
    np.testing.assert_array_equal(ids[0, -3:], [1, 2, 3])
    np.testing.assert_array_equal(mask.sum(1), [3, 16])
    assert pad_queries([[1, 2, 3]], max_len=800, bucket=64)[0].shape == (1, 64)
    with pytest.raises(ValueError, match="query 1 has no tokens"):
        pad_queries([[1], []])


def test_partial_pass_never_runs_later_blocks():
    params = init_params(TINY, jax.random.key(0))
    # Poison blocks after the deepest one used (hidden_states[4] = output of block index 3).
    poisoned = jax.tree.map(lambda x: x, params)
    poisoned["layers"] = {k: v.at[4:].set(jnp.nan) for k, v in params["layers"].items()}
    poisoned["final_norm"] = params["final_norm"] * jnp.nan
    ids = jnp.array([[5, 6, 7, 8]])
    h = features(poisoned, TINY, ids)
    assert h.shape == (1, 64) and bool(jnp.isfinite(h).all())
    np.testing.assert_array_equal(np.asarray(h), np.asarray(features(params, TINY, ids)))
    assert not bool(jnp.isfinite(features(poisoned, TINY, ids, layers="final")).all())


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="transformers oracle needs torch")
    tr = pytest.importorskip("transformers", reason="transformers oracle")
    from coevo_jax.models import load

    hcfg = tr.LlamaConfig(
        vocab_size=TINY.vocab_size,
        hidden_size=TINY.hidden_size,
        intermediate_size=TINY.intermediate_size,
        num_hidden_layers=TINY.num_layers,
        num_attention_heads=TINY.num_heads,
        num_key_value_heads=TINY.num_kv_heads,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    hf = tr.LlamaForCausalLM(hcfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:  # HF initialises norms to one; make them matter
                p.add_(0.2 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("tiny_llama")
    hf.save_pretrained(d)
    model, _ = load(d, progress=False)
    return hf, model


def _hf_last_hidden(hf, ids):
    import torch

    with torch.no_grad():
        out = hf(torch.tensor([ids]), output_hidden_states=True)
    return [h[0, -1].numpy() for h in out.hidden_states]


@pytest.mark.oracle
def test_features_match_transformers_hidden_states(hf_llama):
    hf, model = hf_llama
    rng = np.random.default_rng(0)
    queries = [rng.integers(3, TINY.vocab_size, n).tolist() for n in (5, 11, 8)]
    ids, mask = pad_queries(queries, max_len=800, bucket=4)
    mid = np.asarray(features(model.params, model.config, jnp.asarray(ids), jnp.asarray(mask)))
    final = np.asarray(
        features(model.params, model.config, jnp.asarray(ids), jnp.asarray(mask), layers="final")
    )
    assert mid.shape == (3, 2 * TINY.hidden_size) and final.shape == (3, TINY.hidden_size)
    for b, q in enumerate(queries):
        ref = _hf_last_hidden(hf, q)
        np.testing.assert_allclose(mid[b], np.concatenate([ref[3], ref[4]]), atol=1e-4, rtol=0)
        np.testing.assert_allclose(final[b], ref[6], atol=1e-4, rtol=0)


@pytest.mark.oracle
def test_left_truncation_keeps_the_last_tokens(hf_llama):
    hf, model = hf_llama
    rng = np.random.default_rng(1)
    long_q = rng.integers(3, TINY.vocab_size, 20).tolist()
    short_q = rng.integers(3, TINY.vocab_size, 4).tolist()
    ids, mask = pad_queries([long_q, short_q], max_len=32, bucket=4)  # untruncated batch
    h = np.asarray(
        features(model.params, model.config, jnp.asarray(ids), jnp.asarray(mask), max_len=8)
    )
    ref = _hf_last_hidden(hf, long_q[-8:])
    np.testing.assert_allclose(h[0], np.concatenate([ref[3], ref[4]]), atol=1e-4, rtol=0)
    full = _hf_last_hidden(hf, long_q)
    assert np.abs(h[0] - np.concatenate([full[3], full[4]])).max() > 1e-3  # truncation mattered
    ref_short = _hf_last_hidden(hf, short_q)
    np.testing.assert_allclose(h[1], np.concatenate([ref_short[3], ref_short[4]]), atol=1e-4)


def test_backbone_receives_no_gradient_through_features():
    params = init_params(TINY, jax.random.key(1))
    ids = jnp.array([[5, 6, 7, 8]])
    grads = jax.grad(lambda p: features(p, TINY, ids).sum())(params)
    for leaf in jax.tree.leaves(grads):
        np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_standardization_whitens_each_dimension_and_survives_constant_ones():
    h = np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32) * 5 + 300
    h[:, 2] = 7.0  # a dimension with no spread maps to 0, not NaN
    shift, scale = standardization(jnp.asarray(h))
    z = np.asarray(standardize(jnp.asarray(h), shift, scale))
    np.testing.assert_allclose(shift, h.mean(0), rtol=1e-6)
    keep = [0, 1, 3, 4, 5]
    np.testing.assert_allclose(np.asarray(scale)[keep], 1 / h.std(0)[keep], rtol=1e-4)
    np.testing.assert_allclose(z[:, keep].std(0), 1.0, rtol=1e-4)
    assert np.all(z[:, 2] == 0.0)
    with pytest.raises(ValueError, match=">= 2 queries"):
        standardization(jnp.asarray(h[:1]))


def test_standardization_removes_the_given_fraction_of_the_mean():
    h = np.random.default_rng(1).normal(size=(64, 5)).astype(np.float32) * 2 + 10
    full_shift, full_scale = standardization(jnp.asarray(h))
    shift, scale = standardization(jnp.asarray(h), center=0.25)
    np.testing.assert_allclose(shift, 0.25 * h.mean(0), rtol=1e-6)
    np.testing.assert_array_equal(scale, full_scale)  # the spread is the same
    z = np.asarray(standardize(jnp.asarray(h), shift, scale))
    # each dimension keeps 3/4 of its mean, in units of its spread, and unit variance
    np.testing.assert_allclose(z.mean(0), 0.75 * h.mean(0) / h.std(0), rtol=1e-4)
    np.testing.assert_allclose(z.std(0), 1.0, rtol=1e-4)
    unscaled, _ = standardization(jnp.asarray(h), center=0.0)
    assert np.all(np.asarray(unscaled) == 0.0)
