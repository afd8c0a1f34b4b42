"""coevo_jax.models.decoder: parity with transformers, padding, KV cache, LoRA, remat, partial passes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.lora.weights import TARGET_MODULES, LoRAWeights
from coevo_jax.models import (
    Decoder,
    KVCache,
    ModelConfig,
    forward,
    init_params,
    jit_forward,
    load,
    param_shapes,
)
from tests.helpers import tiny_model_config

TOL = 1e-4


def _tiny(family: str, **kw) -> ModelConfig:
    return tiny_model_config(
        family, **({"vocab_size": 61, "intermediate_size": 48, "num_layers": 3} | kw)
    )


def _perturbed_params(cfg: ModelConfig, seed: int = 0):
    """Random params with non-unit norms, so a wrongly loaded or skipped norm shows."""
    params = init_params(cfg, jax.random.key(seed), std=0.1)
    rng = np.random.RandomState(seed)

    def bump(path, a):
        if "norm" in jax.tree_util.keystr(path):
            return jnp.asarray(
                np.asarray(a) + 0.2 * rng.standard_normal(a.shape).astype(np.float32)
            )
        return a

    return jax.tree_util.tree_map_with_path(bump, params)


# ---------------------------------------------------------------- transformers parity


def _hf_models():
    pytest.importorskip("torch", reason="transformers' PyTorch models are the oracle")
    tr = pytest.importorskip("transformers", reason="transformers' PyTorch models are the oracle")
    common = dict(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=61,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    longrope = {"type": "longrope", "short_factor": [1.0, 1.3], "long_factor": [2.0, 3.5]}
    return {
        "llama": (tr.LlamaConfig(**common), tr.LlamaForCausalLM),
        "llama3_tied": (
            tr.LlamaConfig(**common, rope_scaling=llama3, tie_word_embeddings=True),
            tr.LlamaForCausalLM,
        ),
        "qwen3": (tr.Qwen3Config(**common, head_dim=16), tr.Qwen3ForCausalLM),
        "phi3_longrope": (
            tr.Phi3Config(
                **common,
                partial_rotary_factor=0.5,
                max_position_embeddings=64,
                original_max_position_embeddings=8,
                rope_scaling=longrope,
            ),
            tr.Phi3ForCausalLM,
        ),
        "phi3_window": (tr.Phi3Config(**common, sliding_window=4), tr.Phi3ForCausalLM),
    }


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """Each tiny HF model saved with save_pretrained: name -> (dir, torch model)."""
    import torch

    out = {}
    for i, (name, (hcfg, cls)) in enumerate(_hf_models().items()):
        torch.manual_seed(i)
        model = cls(hcfg).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" in pname:  # HF initialises norms to one; make them matter
                    p.add_(0.2 * torch.randn_like(p))
        d = tmp_path_factory.mktemp(name)
        model.save_pretrained(d)
        out[name] = (d, model)
    return out


def _hf_run(model, ids):
    import torch

    with torch.no_grad():
        o = model(torch.tensor(np.asarray(ids)), output_hidden_states=True)
    return o.logits.numpy(), [h.numpy() for h in o.hidden_states]


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["llama", "llama3_tied", "qwen3", "phi3_longrope", "phi3_window"])
def test_logits_and_hidden_states_match_transformers(hf_dirs, name):
    d, hf = hf_dirs[name]
    model, tok = load(d, progress=False)
    assert tok is None  # save_pretrained of a bare model writes no tokenizer
    cfg = model.config
    # For longrope, T=6 stays inside the original context (short factors), T=12 leaves it.
    for t in (6, 12) if name == "phi3_longrope" else (12,):
        ids = np.random.RandomState(t).randint(0, cfg.vocab_size, (2, t))
        ref_logits, ref_hidden = _hf_run(hf, ids)
        out = model(ids, hidden_layers=tuple(range(cfg.num_layers + 1)))
        assert out.logits.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(out.logits), ref_logits, atol=TOL, rtol=0)
        for i, ref in enumerate(ref_hidden):
            np.testing.assert_allclose(np.asarray(out.hidden_states[i]), ref, atol=TOL, rtol=0)


@pytest.mark.oracle
def test_partial_pass_matches_transformers_hidden_states(hf_dirs):
    d, hf = hf_dirs["qwen3"]
    model, _ = load(d, progress=False)
    ids = np.random.RandomState(0).randint(0, 61, (2, 7))
    _, ref_hidden = _hf_run(hf, ids)
    out = model(ids, hidden_layers=(1, 2), stop_after_hidden=True)
    assert out.logits is None
    assert set(out.hidden_states) == {1, 2}
    for i in (1, 2):
        np.testing.assert_allclose(
            np.asarray(out.hidden_states[i]), ref_hidden[i], atol=TOL, rtol=0
        )
    neg = model(ids, hidden_layers=(-1,), stop_after_hidden=True)  # HF tuple indexing
    np.testing.assert_allclose(np.asarray(neg.hidden_states[-1]), ref_hidden[-1], atol=TOL, rtol=0)


# ---------------------------------------------------------------- JAX-only properties


def test_partial_pass_runs_only_the_needed_layers():
    cfg = _tiny("llama")
    params = _perturbed_params(cfg)
    ids = jnp.arange(10).reshape(2, 5) % cfg.vocab_size
    full = jit_forward(params, cfg, ids, hidden_layers=(1, 2))
    # Garbage in the layers after the deepest requested index must not matter.
    broken = jax.tree.map(lambda a: a, params)
    broken["layers"] = jax.tree.map(lambda a: a.at[2:].set(jnp.nan), params["layers"])
    part = jit_forward(broken, cfg, ids, hidden_layers=(1, 2), stop_after_hidden=True)
    for i in (1, 2):
        np.testing.assert_array_equal(
            np.asarray(part.hidden_states[i]), np.asarray(full.hidden_states[i])
        )
    emb = jit_forward(params, cfg, ids, hidden_layers=(0,), stop_after_hidden=True)
    np.testing.assert_array_equal(
        np.asarray(emb.hidden_states[0]), np.asarray(params["embed"][ids])
    )
    with pytest.raises(ValueError, match="out of range"):
        forward(params, cfg, ids, hidden_layers=(4,))
    with pytest.raises(ValueError, match="needs at least one index"):
        forward(params, cfg, ids, stop_after_hidden=True)


@pytest.mark.parametrize("family", ["qwen3", "phi3"])
def test_left_padded_rows_equal_unpadded(family):
    cfg = _tiny(family, partial_rotary_factor=0.5 if family == "phi3" else 1.0)
    params = _perturbed_params(cfg)
    rng = np.random.RandomState(1)
    lengths = [6, 3]
    t = max(lengths)
    ids = np.zeros((2, t), np.int32)
    mask = np.zeros((2, t), np.int32)
    rows = [rng.randint(1, cfg.vocab_size, n) for n in lengths]
    for b, r in enumerate(rows):
        ids[b, t - len(r) :] = r
        mask[b, t - len(r) :] = 1
    out = jit_forward(params, cfg, jnp.asarray(ids), jnp.asarray(mask), hidden_layers=(2,))
    assert np.isfinite(np.asarray(out.logits)).all()  # pad queries see no key: still finite
    for b, r in enumerate(rows):
        alone = jit_forward(params, cfg, jnp.asarray(r[None]), hidden_layers=(2,))
        np.testing.assert_allclose(
            np.asarray(out.logits[b, t - len(r) :]), np.asarray(alone.logits[0]), atol=1e-5, rtol=0
        )
        np.testing.assert_allclose(
            np.asarray(out.hidden_states[2][b, t - len(r) :]),
            np.asarray(alone.hidden_states[2][0]),
            atol=1e-5,
            rtol=0,
        )


@pytest.mark.parametrize("family", ["qwen3", "phi3"])
def test_kv_cache_prefill_then_decode_equals_full_pass(family):
    extra = dict(partial_rotary_factor=0.5, sliding_window=5) if family == "phi3" else {}
    cfg = _tiny(family, **extra)
    params = _perturbed_params(cfg)
    rng = np.random.RandomState(2)
    t, s = 9, 12
    ids = rng.randint(1, cfg.vocab_size, (2, t))
    mask = np.ones((2, t), np.int32)
    mask[0, :3] = 0  # row 0 is left-padded
    full = jit_forward(params, cfg, jnp.asarray(ids), jnp.asarray(mask)).logits
    cache_mask = np.zeros((2, s), np.int32)
    cache_mask[:, :t] = mask
    cache = KVCache.init(cfg, 2, s)
    out = jit_forward(
        params, cfg, jnp.asarray(ids[:, :5]), jnp.asarray(cache_mask), cache=cache, cache_index=0
    )
    steps = [out.logits]
    for i in range(5, t):
        out = jit_forward(
            params,
            cfg,
            jnp.asarray(ids[:, i : i + 1]),
            jnp.asarray(cache_mask),
            cache=out.cache,
            cache_index=i,
        )
        steps.append(out.logits)
    inc = np.asarray(jnp.concatenate(steps, axis=1))
    real = mask.astype(bool)
    np.testing.assert_allclose(inc[real], np.asarray(full)[real], atol=1e-5, rtol=0)


def _random_lora(cfg: ModelConfig, n_agents: int, rank: int = 2, seed: int = 0) -> LoRAWeights:
    """Adapters with random nonzero A and B so every agent really changes the output."""
    shapes = param_shapes(cfg)["layers"]
    rng = np.random.RandomState(seed)
    params = {}
    for m in TARGET_MODULES:
        _, d_in, d_out = shapes[m]
        a = 0.3 * rng.standard_normal((cfg.num_layers, n_agents, d_in, rank))
        b = 0.3 * rng.standard_normal((cfg.num_layers, n_agents, rank, d_out))
        params[m] = {"A": jnp.asarray(a, jnp.float32), "B": jnp.asarray(b, jnp.float32)}
    return LoRAWeights(params=params, scale=2.0)


def test_lora_agent_off_is_bit_exact_and_mixed_batch_equals_per_agent_runs():
    cfg = _tiny("qwen3")
    params = _perturbed_params(cfg)
    lora = _random_lora(cfg, n_agents=3)
    ids = jnp.asarray(np.random.RandomState(3).randint(0, cfg.vocab_size, (4, 6)))
    base = jit_forward(params, cfg, ids).logits
    off = jit_forward(params, cfg, ids, lora=(lora, jnp.full((4,), -1))).logits
    # Same values as the base model; bit-exactness across two *different* compiled programs
    # is up to XLA's fusion choices (Qwen3's q/k norm reduction can differ by an ulp).
    np.testing.assert_allclose(np.asarray(off), np.asarray(base), atol=2e-6, rtol=0)
    llama = _tiny("llama")
    lp = _perturbed_params(llama)
    b_llama = jit_forward(lp, llama, ids).logits
    o_llama = jit_forward(lp, llama, ids, lora=(_random_lora(llama, 3), jnp.full((4,), -1))).logits
    np.testing.assert_array_equal(np.asarray(o_llama), np.asarray(b_llama))

    agents = jnp.asarray([2, -1, 0, 1])
    mixed = np.asarray(jit_forward(params, cfg, ids, lora=(lora, agents)).logits)
    for b, a in enumerate(np.asarray(agents)):
        alone = jit_forward(params, cfg, ids[b : b + 1], lora=(lora, jnp.asarray([a]))).logits
        np.testing.assert_allclose(mixed[b], np.asarray(alone[0]), atol=1e-5, rtol=0)
        if a >= 0:
            assert np.abs(mixed[b] - np.asarray(base[b])).max() > 1e-3  # the adapter acts


def test_lora_dropout_only_with_rng():
    cfg = _tiny("llama")
    params = _perturbed_params(cfg)
    lora = _random_lora(cfg, n_agents=2).replace(dropout=0.5)
    ids = jnp.zeros((2, 4), jnp.int32) + 5
    agents = jnp.asarray([0, 1])
    a = jit_forward(params, cfg, ids, lora=(lora, agents)).logits
    b = jit_forward(params, cfg, ids, lora=(lora, agents)).logits
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c = jit_forward(params, cfg, ids, lora=(lora, agents), lora_rng=jax.random.key(0)).logits
    assert np.abs(np.asarray(c) - np.asarray(a)).max() > 1e-4


def test_remat_gives_same_values_and_grads():
    cfg = _tiny("phi3", partial_rotary_factor=0.5)
    params = _perturbed_params(cfg)
    lora = _random_lora(cfg, n_agents=2)
    ids = jnp.asarray(np.random.RandomState(4).randint(0, cfg.vocab_size, (2, 5)))
    agents = jnp.asarray([1, 0])

    def loss(lp, p, remat):
        out = forward(p, cfg, ids, lora=(lora.replace(params=lp), agents), remat=remat)
        return jnp.mean(jax.nn.log_softmax(out.logits)[..., 3])

    plain = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)
    v0, g0 = plain(lora.params, params, False)
    v1, g1 = plain(lora.params, params, True)
    np.testing.assert_allclose(float(v0), float(v1), rtol=1e-6)
    for x, y in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6, rtol=1e-5)


def test_bf16_compute_is_close_and_logits_stay_fp32():
    cfg = _tiny("llama")
    params = _perturbed_params(cfg)
    ids = jnp.asarray(np.random.RandomState(5).randint(0, cfg.vocab_size, (2, 6)))
    f32 = jit_forward(params, cfg, ids).logits
    out = jit_forward(params, cfg, ids, hidden_layers=(1,), compute_dtype=jnp.bfloat16)
    assert out.logits.dtype == jnp.float32
    assert out.hidden_states[1].dtype == jnp.bfloat16
    assert np.abs(np.asarray(out.logits) - np.asarray(f32)).max() < 0.1


def test_bf16_matmuls_with_fp32_activations_are_close():
    cfg = _tiny("llama")
    params = _perturbed_params(cfg)
    ids = jnp.asarray(np.random.RandomState(5).randint(0, cfg.vocab_size, (2, 6)))
    f32 = jit_forward(params, cfg, ids).logits
    same = jit_forward(params, cfg, ids, matmul_dtype=jnp.float32).logits
    np.testing.assert_array_equal(np.asarray(same), np.asarray(f32))
    out = jit_forward(params, cfg, ids, hidden_layers=(1,), matmul_dtype=jnp.bfloat16)
    assert out.hidden_states[1].dtype == jnp.float32
    err = np.abs(np.asarray(out.logits) - np.asarray(f32)).max()
    assert 0 < err < 0.1


def test_decoder_module_round_trips_params_and_calls_forward():
    cfg = _tiny("qwen3", tie_word_embeddings=True)
    params = _perturbed_params(cfg)
    model = Decoder(cfg, params)
    assert "lm_head" not in model.params
    for a, b in zip(jax.tree.leaves(model.params), jax.tree.leaves(params), strict=True):
        assert a is b or np.array_equal(np.asarray(a), np.asarray(b))
    ids = jnp.ones((1, 3), jnp.int32)
    np.testing.assert_array_equal(
        np.asarray(model(ids).logits), np.asarray(jit_forward(params, cfg, ids).logits)
    )
    from flax import nnx

    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert n_params == sum(x.size for x in jax.tree.leaves(params))


@pytest.mark.parametrize("family", ["qwen3", "phi3"])
def test_blockwise_and_dpa_attention_equal_xla_in_prefill_and_decode(family):
    """The memory-bounded attentions change only the summation order on real tokens: a
    left-padded prefill (tiles of 4 over 9 tokens, causal skipping) and cached decode steps."""
    extra = dict(partial_rotary_factor=0.5, sliding_window=5) if family == "phi3" else {}
    cfg = _tiny(family, **extra)
    params = _perturbed_params(cfg)
    ids = jnp.asarray(np.random.RandomState(6).randint(1, cfg.vocab_size, (2, 9)))
    mask = np.ones((2, 9), np.int32)
    mask[0, :3] = 0
    real = mask.astype(bool)
    run = lambda **kw: np.asarray(jit_forward(params, cfg, ids, jnp.asarray(mask), **kw).logits)
    ref = run()
    for kw in (
        dict(attention="blockwise", attention_block=4),
        dict(attention="blockwise"),
        dict(attention="auto", attention_block=4),  # CPU: blockwise
    ):
        np.testing.assert_allclose(run(**kw)[real], ref[real], atol=1e-5, rtol=0)
    cache_mask = jnp.asarray(np.pad(mask, ((0, 0), (0, 3))))
    out = jit_forward(
        params,
        cfg,
        ids[:, :5],
        cache_mask,
        cache=KVCache.init(cfg, 2, 12),
        cache_index=0,
        attention="blockwise",
        attention_block=4,
    )
    steps = [out.logits]
    for i in range(5, 9):
        out = jit_forward(
            params,
            cfg,
            ids[:, i : i + 1],
            cache_mask,
            cache=out.cache,
            cache_index=i,
            attention="blockwise",
            attention_block=4,
        )
        steps.append(out.logits)
    inc = np.asarray(jnp.concatenate(steps, axis=1))
    np.testing.assert_allclose(inc[real], ref[real], atol=1e-5, rtol=0)


def test_remat_policies_give_the_same_values_and_grads():
    """Every ``remat`` choice computes the same math; only XLA's fusion, so the fp32
    rounding, differs between them."""
    cfg = _tiny("qwen3")
    params = _perturbed_params(cfg)
    lora = _random_lora(cfg, n_agents=2)
    ids = jnp.asarray(np.random.RandomState(7).randint(0, cfg.vocab_size, (2, 6)))
    agents = jnp.asarray([1, 0])

    def loss(lp, remat):
        out = forward(params, cfg, ids, lora=(lora.replace(params=lp), agents), remat=remat)
        return jnp.mean(jax.nn.log_softmax(out.logits)[..., 3])

    grad = jax.jit(jax.value_and_grad(loss), static_argnums=1)
    v0, g0 = grad(lora.params, True)
    for remat in ("full", "dots", "dots_no_batch", False, "none"):
        v, g = grad(lora.params, remat)
        np.testing.assert_allclose(float(v), float(v0), rtol=1e-6)
        for x, y in zip(jax.tree.leaves(g0), jax.tree.leaves(g), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="remat must be"):
        forward(params, cfg, ids, remat="everything")
    with pytest.raises(ValueError, match="attention must be"):
        forward(params, cfg, ids, attention="flash")
