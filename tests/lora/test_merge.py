"""merge / export_merged: a merged HF directory gives the logits of the base model + adapter.

Oracles: our own forward with ``lora=(stacked, agent_ids)`` and transformers loading the
exported directory (fp32), for tiny random Llama, Qwen3 (tied) and Phi-3 (fused tensors);
SmolLM2 from the shipped GGUF in a slow test that also times the export.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.lora import AgentLoRA, LoRAConfig, init_lora, merge, unstack
from coevo_jax.models import export_merged
from coevo_jax.models.decoder import jit_forward
from coevo_jax.models.hf_loader import load_hf_params
from tests.helpers import family_configs
from tests.models._params import numpy_params as _base

CONFIGS = family_configs(llama=dict(eos_token_ids=(2,)))
# Llama adapts a subset (q, v, down) so the merge leaves the other projections untouched.
TARGETS = {"llama": ("q", "v", "down"), "qwen3": None, "phi3": None}
IDS = np.array([[5, 9, 3, 17, 22, 8, 40, 1]], np.int32)


def _adapters(params, family: str, n: int = 3, seed: int = 1):
    targets = TARGETS[family]
    cfg = LoRAConfig(
        n_agents=n,
        rank=4,
        alpha=8.0,
        dropout=0.0,
        **({"target_modules": targets} if targets else {}),
    )
    w = init_lora(jax.random.PRNGKey(seed), cfg, params)
    rng = np.random.default_rng(seed)
    return w.replace(
        params=jax.tree.map(
            lambda x: jnp.asarray(0.2 * rng.standard_normal(x.shape), jnp.float32), w.params
        )
    )


def _lora_logits(params, cfg, w, agent: int) -> np.ndarray:
    return np.asarray(
        jit_forward(params, cfg, jnp.asarray(IDS), lora=(w, jnp.array([agent]))).logits
    )


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_merged_directory_loads_back_as_the_adapted_model(tmp_path, family):
    cfg = CONFIGS[family]
    base = _base(cfg)
    w = _adapters(base, family)
    out = export_merged(base, cfg, w, 2, tmp_path / "merged", progress=False)
    cfg2, merged = load_hf_params(out, progress=False)
    assert cfg2 == cfg
    np.testing.assert_allclose(
        np.asarray(jit_forward(merged, cfg, jnp.asarray(IDS)).logits),
        _lora_logits(base, cfg, w, 2),
        atol=1e-5,
        rtol=0,
    )
    # the projections without an adapter, the norms and embeddings are written untouched
    adapted = set(w.params)
    for name, leaf in merged["layers"].items():
        if name not in adapted:
            np.testing.assert_array_equal(np.asarray(leaf), np.asarray(base["layers"][name]))
    np.testing.assert_array_equal(np.asarray(merged["embed"]), np.asarray(base["embed"]))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_transformers_gives_the_adapter_logits(tmp_path, family):
    torch = pytest.importorskip("torch", reason="transformers (PyTorch) is the oracle")
    tr = pytest.importorskip("transformers", reason="transformers is the oracle (test extra)")
    cfg = CONFIGS[family]
    base = _base(cfg, seed=3)
    w = _adapters(base, family, seed=4)
    for agent in (0, 1):
        out = export_merged(base, cfg, w, agent, tmp_path / f"agent{agent}", progress=False)
        model = tr.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
        model.eval()
        with torch.no_grad():
            theirs = model(torch.from_numpy(IDS.astype(np.int64))).logits.numpy()
        ours = _lora_logits(base, cfg, w, agent)
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
        # a different agent's adapter gives different logits: the export picked the right slot
        assert np.abs(_lora_logits(base, cfg, w, 2) - theirs).max() > 1e-2


def test_single_agent_adapter_bf16_and_argument_errors(tmp_path):
    cfg = CONFIGS["llama"]
    base = _base(cfg)
    w = _adapters(base, "llama")
    one: AgentLoRA = unstack(w, 1)
    out = export_merged(base, cfg, one, None, tmp_path / "bf16", dtype=jnp.bfloat16, progress=False)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    _, merged = load_hf_params(out, dtype=jnp.bfloat16, progress=False)
    expect = merge(base, w, 1)
    for name in ("q", "v", "down"):
        np.testing.assert_array_equal(
            np.asarray(merged["layers"][name]),
            np.asarray(expect["layers"][name].astype(jnp.bfloat16)),
        )
    with pytest.raises(ValueError, match="agent_id is required"):
        merge(base, w, None)
    with pytest.raises(ValueError, match="agent_id 3 out of range for 3"):
        export_merged(base, cfg, w, 3, tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match="agent_id -1 out of range"):
        merge(base, w, -1)
    with pytest.raises(ValueError, match="single AgentLoRA has only agent 0"):
        merge(base, one, 1)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_smollm2_merged_export_matches_transformers_and_is_timed(tmp_path):
    pytest.importorskip("gguf")
    torch = pytest.importorskip("torch", reason="transformers (PyTorch) is the oracle")
    tr = pytest.importorskip("transformers", reason="transformers is the oracle (test extra)")
    from coevo_jax.models import default_model_path, load

    try:
        path = Path(default_model_path())
    except FileNotFoundError as e:
        pytest.skip(str(e))
    model, tok = load(path, progress=False)
    w = init_lora(
        jax.random.PRNGKey(0), LoRAConfig(n_agents=2, rank=16, alpha=32, dropout=0.0), model.params
    )
    w = w.replace(
        params=jax.tree.map(
            lambda x: jax.random.normal(jax.random.PRNGKey(1), x.shape) * 0.02, w.params
        )
    )
    t0 = time.perf_counter()
    out = export_merged(model.params, model.config, w, 1, tmp_path / "smol", tokenizer=tok)
    print(f"export_merged SmolLM2-135M fp32: {time.perf_counter() - t0:.1f} s")
    ids = np.array([[1, 504, 3060, 282, 4649, 314, 2]], np.int32)
    ours = np.asarray(model(jnp.asarray(ids), lora=(w, jnp.array([1]))).logits)
    hf = tr.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    hf.eval()
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids.astype(np.int64))).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-3, rtol=1e-3)
    their_tok = tr.AutoTokenizer.from_pretrained(str(out))
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(messages)
    assert (
        their_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        == prompt
    )
    assert their_tok.encode(prompt, add_special_tokens=False) == tok.encode(prompt)


def test_coevo_merge_cli_writes_the_adapted_model(tmp_path, capsys):
    from coevo_jax.cli import main
    from coevo_jax.lora import export_peft
    from coevo_jax.models import load, save_hf

    cfg = CONFIGS["llama"]
    base = _base(cfg)
    w = _adapters(base, "llama")
    save_hf(base, cfg, tmp_path / "base", progress=False)
    export_peft(w, 1, tmp_path / "adapter", base_model="tiny-llama")
    argv = ["merge", "--model", str(tmp_path / "base"), "--adapter", str(tmp_path / "adapter")]
    assert main(argv + ["--out", str(tmp_path / "merged"), "--no-progress"]) == 0
    assert "merged model written" in capsys.readouterr().out
    merged, _ = load(tmp_path / "merged", progress=False)
    np.testing.assert_allclose(
        np.asarray(merged(jnp.asarray(IDS)).logits),
        _lora_logits(base, cfg, w, 1),
        atol=1e-4,
        rtol=0,
    )
    # a second run into the same directory is refused with a message, not a traceback
    assert main(argv + ["--out", str(tmp_path / "merged"), "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"coevo merge: {tmp_path / 'merged'}: directory exists and is not empty; pass "
        "overwrite=True to replace it (its current contents are deleted) or choose another path\n"
    )
