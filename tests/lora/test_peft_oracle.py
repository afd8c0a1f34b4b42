"""PEFT (PyTorch) loads our exported adapters onto transformers' model and gives our logits."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PEFT/transformers are the oracle (test extra)")
tr = pytest.importorskip("transformers", reason="PEFT/transformers are the oracle (test extra)")
peft = pytest.importorskip("peft", reason="PEFT is the oracle (test extra)")

from coevo_jax.lora import LoRAConfig, export_peft, import_peft, init_lora, stack  # noqa: E402
from coevo_jax.models import load  # noqa: E402

COMMON = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=61,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
FAMILIES = {
    "llama": lambda: (tr.LlamaConfig(**COMMON), tr.LlamaForCausalLM),
    "qwen3": lambda: (tr.Qwen3Config(**COMMON, head_dim=16), tr.Qwen3ForCausalLM),
    "phi3": lambda: (tr.Phi3Config(**COMMON, partial_rotary_factor=0.5), tr.Phi3ForCausalLM),
}


def _random_adapters(params, n=3, seed=0):
    w = init_lora(
        jax.random.PRNGKey(seed), LoRAConfig(n_agents=n, rank=4, alpha=8, dropout=0.0), params
    )
    return w.replace(
        params=jax.tree.map(
            lambda x: jax.random.normal(jax.random.PRNGKey(seed + 1), x.shape) * 0.2, w.params
        )
    )


def _peft_logits(base_dir, adapter_dir, ids):
    model = tr.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    pm = peft.PeftModel.from_pretrained(model, adapter_dir)
    pm.eval()
    with torch.no_grad():
        return pm(torch.from_numpy(np.asarray(ids))).logits.numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_peft_gives_our_logits(tmp_path, family):
    cfg, cls = FAMILIES[family]()
    torch.manual_seed(0)
    cls(cfg).save_pretrained(tmp_path / "base")
    model, _ = load(tmp_path / "base")
    adapters = _random_adapters(model.params)
    ids = np.array([[5, 9, 3, 17, 22, 8, 40]], np.int32)
    for agent in (0, 2):
        out = export_peft(
            adapters,
            agent,
            tmp_path / f"agent{agent}",
            base_model=str(tmp_path / "base"),
            family=family,
        )
        ours = np.asarray(model(jnp.asarray(ids), lora=(adapters, jnp.array([agent]))).logits)
        theirs = _peft_logits(str(tmp_path / "base"), str(out), ids)
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)
        # and back: the imported adapter in a fresh stack gives the same logits again
        back = stack([import_peft(out)])
        again = np.asarray(model(jnp.asarray(ids), lora=(back, jnp.array([0]))).logits)
        np.testing.assert_allclose(again, ours, atol=1e-5)


@pytest.mark.slow
def test_peft_on_smollm2_from_gguf(tmp_path):
    pytest.importorskip("gguf")
    from coevo_jax.models import default_model_path

    try:
        path = Path(default_model_path())
    except Exception as e:  # noqa: BLE001 - the embedded model is an optional install here
        pytest.skip(f"embedded model not installed: {e}")
    model, _ = load(path)
    adapters = _random_adapters(model.params, n=2, seed=3)
    ids = np.array([[1, 504, 3060, 282, 4649, 314, 2]], np.int32)
    out = export_peft(
        adapters, 1, tmp_path / "smol", base_model="HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    ours = np.asarray(model(jnp.asarray(ids), lora=(adapters, jnp.array([1]))).logits)
    hf = tr.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    pm = peft.PeftModel.from_pretrained(hf, str(out))
    pm.eval()
    with torch.no_grad():
        theirs = pm(torch.from_numpy(ids.astype(np.int64))).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-3, rtol=1e-3)
    assert np.abs(ours - theirs).max() < 1e-3
