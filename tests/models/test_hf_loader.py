"""coevo_jax.models.hf_loader / loading / config: HF directories, config parsing, clear errors."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from coevo_jax.models import ModelConfig, ModelLoadError, UnsupportedModelError, init_params, load
from coevo_jax.models.decoder import jit_forward

HF_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 40,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "eos_token_id": [2, 3],
}

# Phi-4-mini's config.json, shrunk: transformers<5 spelling with top-level rope fields.
HF_PHI4_MINI_STYLE = {
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "hidden_size": 24,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 3,
    "num_key_value_heads": 1,
    "vocab_size": 50,
    "partial_rotary_factor": 0.75,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 3, "long_factor": [2.0] * 3},
    "rope_theta": 10000.0,
    "sliding_window": 262144,
    "tie_word_embeddings": True,
}


def _torch_layout(cfg: ModelConfig, params) -> dict[str, np.ndarray]:
    """Our params written back in HF's names and [out, in] layout (unfused families)."""
    p = jax.tree.map(np.asarray, params)
    out = {"model.embed_tokens.weight": p["embed"], "model.norm.weight": p["final_norm"]}
    if "lm_head" in p:
        out["lm_head.weight"] = p["lm_head"].T
    names = {
        "q": "self_attn.q_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
        "o": "self_attn.o_proj",
        "gate": "mlp.gate_proj",
        "up": "mlp.up_proj",
        "down": "mlp.down_proj",
    }
    for i in range(cfg.num_layers):
        pre = f"model.layers.{i}."
        for ours, theirs in names.items():
            out[pre + theirs + ".weight"] = p["layers"][ours][i].T
        out[pre + "input_layernorm.weight"] = p["layers"]["attn_norm"][i]
        out[pre + "post_attention_layernorm.weight"] = p["layers"]["mlp_norm"][i]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


@pytest.fixture()
def llama_dir(tmp_path):
    cfg = ModelConfig.from_hf_dict(HF_LLAMA)
    params = init_params(cfg, jax.random.key(0), std=0.2)
    (tmp_path / "config.json").write_text(json.dumps(HF_LLAMA))
    save_file(_torch_layout(cfg, params), str(tmp_path / "model.safetensors"))
    return tmp_path, cfg, params


def test_config_reads_both_rope_spellings_and_phi4_mini_style():
    cfg = ModelConfig.from_hf_dict(HF_PHI4_MINI_STYLE)
    assert cfg.family == "phi3" and cfg.rope_type == "longrope"
    assert cfg.head_dim == 8 and cfg.rotary_dim == 6 and cfg.tie_word_embeddings
    assert cfg.original_max_position_embeddings == 4096 and cfg.sliding_window == 262144
    expect = np.sqrt(1 + np.log(131072 / 4096) / np.log(4096))
    assert cfg.longrope_attention_factor == pytest.approx(expect)
    new_style = dict(HF_LLAMA)
    del new_style["rope_theta"]
    new_style["rope_parameters"] = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    cfg = ModelConfig.from_hf_dict(new_style)
    assert (cfg.rope_type, cfg.rope_theta, cfg.rope_factor) == ("llama3", 500000.0, 32.0)
    assert cfg.eos_token_ids == (2, 3)
    qwen = dict(HF_LLAMA, model_type="qwen3", head_dim=12, architectures=["Qwen3ForCausalLM"])
    assert ModelConfig.from_hf_dict(qwen).head_dim == 12 and ModelConfig.from_hf_dict(qwen).qk_norm


def test_config_errors_name_the_file_and_the_problem(tmp_path):
    with pytest.raises(UnsupportedModelError, match=r"cfg\.json.*'gpt2'"):
        ModelConfig.from_hf_dict(
            {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, source="cfg.json"
        )
    bad_rope = dict(HF_LLAMA, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(UnsupportedModelError, match="yarn"):
        ModelConfig.from_hf_dict(bad_rope)
    with pytest.raises(UnsupportedModelError, match="attention_bias"):
        ModelConfig.from_hf_dict(dict(HF_LLAMA, attention_bias=True))
    missing = {k: v for k, v in HF_LLAMA.items() if k != "hidden_size"}
    with pytest.raises(ValueError, match=r"x\.json: missing field 'hidden_size'"):
        ModelConfig.from_hf_dict(missing, source="x.json")
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        ModelConfig.from_hf_dict(dict(HF_LLAMA, num_key_value_heads=3))
    # Through load(): an unknown family names the directory's config.json.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(UnsupportedModelError, match=r"config\.json.*'mamba'"):
        load(tmp_path, progress=False)


def test_loads_single_file_and_matches_the_params(llama_dir):
    d, cfg, params = llama_dir
    model, tok = load(d, progress=False)
    assert tok is None and model.config == cfg
    for a, b in zip(jax.tree.leaves(model.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    bf16, _ = load(d, dtype=jnp.bfloat16, progress=False)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(bf16.params))


def test_sharded_index_loads_the_same_as_a_single_file(llama_dir, tmp_path):
    d, cfg, params = llama_dir
    tensors = _torch_layout(cfg, params)
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    sd = tmp_path / "sharded"
    sd.mkdir()
    weight_map = {}
    for fname, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(sd / fname))
        weight_map.update(dict.fromkeys(keys, fname))
    (sd / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (sd / "config.json").write_text(json.dumps(HF_LLAMA))
    model, _ = load(sd, progress=False)
    for a, b in zip(jax.tree.leaves(model.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_truncated_safetensors_is_one_clear_error_naming_the_file(llama_dir):
    d, _, _ = llama_dir
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"model\.safetensors.*(truncated|corrupt)"):
        load(d, progress=False)
    f.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ModelLoadError, match=r"model\.safetensors"):
        load(d, progress=False)


def test_shape_mismatch_and_missing_tensor_name_the_tensor(llama_dir):
    d, cfg, params = llama_dir
    tensors = _torch_layout(cfg, params)
    tensors["model.layers.1.self_attn.k_proj.weight"] = np.zeros((4, 16), np.float32)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(
        ModelLoadError,
        match=r"'model\.layers\.1\.self_attn\.k_proj\.weight' has shape \(4, 16\).*\(8, 16\)",
    ):
        load(d, progress=False)
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(
        ModelLoadError,
        match=r"model\.safetensors: tensor 'model\.layers\.1\.self_attn\.k_proj\.weight' missing",
    ):
        load(d, progress=False)


def test_missing_paths_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        load(tmp_path / "nope", progress=False)
    with pytest.raises(ModelLoadError, match=r"config\.json: not found"):
        load(tmp_path, progress=False)
    (tmp_path / "config.json").write_text(json.dumps(HF_LLAMA))
    with pytest.raises(
        ModelLoadError, match=r"no model\.safetensors or model\.safetensors\.index\.json"
    ):
        load(tmp_path, progress=False)
    (tmp_path / "weights.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="expected an HF model directory or a .gguf file"):
        load(tmp_path / "weights.txt", progress=False)


def test_read_config_file_names_the_file_in_every_error(tmp_path):
    """The server's --random-config and a model directory read config.json one way; each
    failure is a user error (one line from ``coevo``) naming the file."""
    from coevo_jax._errors import UserError
    from coevo_jax.models.config import ModelConfigError
    from coevo_jax.models.hf_loader import read_config_file

    f = tmp_path / "c.json"
    with pytest.raises(ModelLoadError, match=r"model config not found: .*c\.json"):
        read_config_file(f)
    f.write_text("[1, 2]")
    with pytest.raises(ModelLoadError, match=r"c\.json: expected a JSON object, got list"):
        read_config_file(f)
    f.write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"c\.json: not valid JSON"):
        read_config_file(f)
    f.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelConfigError, match=r"c\.json: missing field 'hidden_size'") as e:
        read_config_file(f)
    assert isinstance(e.value, UserError) and isinstance(e.value, ValueError)
    f.write_text(json.dumps(HF_LLAMA))
    assert read_config_file(f) == ModelConfig.from_hf_dict(HF_LLAMA)


def test_load_with_mesh_places_each_parameter_with_its_sharding(llama_dir):
    from coevo_jax.parallel import make_mesh

    d, cfg, params = llama_dir
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    model, _ = load(d, mesh=mesh, progress=False)
    q = model.params["layers"]["q"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")
    assert len(q.addressable_shards) == 8 and q.addressable_shards[0].data.shape == (2, 8, 8)
    np.testing.assert_array_equal(np.asarray(q), np.asarray(params["layers"]["q"]))
    ids = jnp.asarray(np.arange(8).reshape(2, 4))
    np.testing.assert_allclose(
        np.asarray(model(ids).logits),
        np.asarray(jit_forward(params, cfg, ids).logits),
        atol=1e-5,
        rtol=0,
    )


def test_tokenizer_is_loaded_when_the_directory_has_one(llama_dir):
    tokenizers = pytest.importorskip("tokenizers")
    d, _, _ = llama_dir
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>")
    )
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "b", "pad_token": "a"}))
    _, tok = load(d, progress=False)
    assert tok is not None
    assert tok.encode("a b a") == [0, 1, 0]
