"""vLLM's own adapter loader (0.33, CPU) accepts our PEFT export and holds our tensors."""

import numpy as np
import pytest

from tests.lora.test_lora import _random_weights

pytest.importorskip("torch", reason="vLLM's loader needs torch (test extra)")
lora_model = pytest.importorskip(
    "vllm.lora.lora_model", reason="vllm==0.33.0 --no-deps (installed by .ci/run)"
)
peft_helper = pytest.importorskip("vllm.lora.peft_helper", reason="vllm==0.33.0 --no-deps")

from coevo_jax.lora import export_peft, unstack  # noqa: E402

HF = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


def _load(path, expected):
    lora_model.PIN_MEMORY = False  # pinning needs a CUDA driver; unrelated to parsing
    helper = peft_helper.PEFTHelper.from_local_dir(str(path), max_position_embeddings=2048)
    return helper, lora_model.LoRAModel.from_local_checkpoint(
        str(path), expected, helper, lora_model_id=1, device="cpu"
    )


def test_vllm_loads_llama_export(tmp_path):
    w = _random_weights()
    out = export_peft(w, 1, tmp_path / "agent1-v3", base_model="tiny")
    helper, model = _load(
        out, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    )
    assert helper.r == 4 and helper.lora_alpha == 8
    assert len(model.loras) == 2 * 7  # 2 layers x 7 modules
    agent = unstack(w, 1)
    for m, name in HF.items():
        for layer in range(2):
            lw = model.loras[f"model.layers.{layer}.{name}"]
            np.testing.assert_array_equal(
                lw.lora_a.numpy(), np.asarray(agent.params[m]["A"][layer]).T
            )
            np.testing.assert_array_equal(
                lw.lora_b.numpy(), np.asarray(agent.params[m]["B"][layer]).T
            )
            assert lw.scaling == pytest.approx(w.scale)


def test_vllm_loads_phi3_fused_export(tmp_path):
    w = _random_weights()
    out = export_peft(w, 0, tmp_path / "agent0-v1", base_model="tiny-phi3", family="phi3")
    helper, model = _load(out, {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})
    assert len(model.loras) == 2 * 4
    agent = unstack(w, 0)
    lw = model.loras["model.layers.1.self_attn.qkv_proj"]
    a, b = lw.lora_a.numpy().T, lw.lora_b.numpy().T  # [in, 3r], [3r, out]
    x = np.random.default_rng(0).normal(size=(3, a.shape[0])).astype(np.float32)
    fused = lw.scaling * x @ a @ b
    parts = [
        w.scale * x @ np.asarray(agent.params[m]["A"][1]) @ np.asarray(agent.params[m]["B"][1])
        for m in "qkv"
    ]
    np.testing.assert_allclose(fused, np.concatenate(parts, axis=1), rtol=1e-5, atol=1e-5)


def test_served_rank_holds_every_exported_adapter(tmp_path):
    """``--max-lora-rank`` must hold the fused qkv adapter (3r), not the agent rank r."""
    from coevo_jax.lora.peft_io import served_rank

    w = _random_weights()
    r = int(w.params["q"]["A"].shape[-1])
    out = export_peft(w, 0, tmp_path / "agent0-v1", base_model="tiny-phi3", family="phi3")
    _, model = _load(out, {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})
    biggest = max(lw.lora_a.shape[0] for lw in model.loras.values())
    assert biggest == 3 * r == served_rank(r, "phi3", tuple(HF))
    assert served_rank(r, "phi3", ("gate", "up", "o")) == 2 * r
    assert served_rank(r, "phi3", ("o", "down")) == r
    assert served_rank(r, "llama", tuple(HF)) == r
