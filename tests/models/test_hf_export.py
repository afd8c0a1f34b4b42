"""coevo_jax.models.hf_export: config.json, safetensors layout, sharding, tokenizer, atomicity.

Oracles: our own loader (exact round trip) and transformers (fp32 logits of the exported
directory against our forward), for tiny random Llama (llama3 rope scaling), Qwen3 (tied,
q/k norm) and Phi-3 (fused tensors, partial rotary, longrope in both regimes).
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import safe_open

from coevo_jax.models import ModelConfig, hf_export
from coevo_jax.models.decoder import jit_forward
from coevo_jax.models.hf_export import hf_config_dict, parse_size, save_hf
from coevo_jax.models.hf_loader import load_hf_params
from coevo_jax.models.tokenizer import Tokenizer
from tests.helpers import FAMILY_MODEL, family_configs, tiny_model_config
from tests.models._params import numpy_params as _params

CONFIGS = family_configs(
    llama=dict(
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_type="llama3",
        rope_factor=8.0,
        original_max_position_embeddings=8,
        max_position_embeddings=64,
        eos_token_ids=(2, 3),
    ),
    qwen3=dict(rope_theta=1e6, eos_token_ids=(2,)),
    phi3=dict(
        rms_norm_eps=1e-5,
        rope_type="longrope",
        original_max_position_embeddings=8,
        max_position_embeddings=64,
        rope_short_factor=(1.0, 1.5),
        rope_long_factor=(2.0, 3.0),
    ),
)
# T=6 stays within original_max_position_embeddings=8; T=12 switches longrope to its long
# factors (and is where llama3 scaling matters least, but still exercises it).
IDS = {t: (np.arange(3, 3 + t, dtype=np.int32)[None] * 7) % 61 for t in (6, 12)}


def _assert_tree_equal(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_config_dict_round_trips_and_is_json(family):
    cfg = CONFIGS[family]
    d = json.loads(json.dumps(hf_config_dict(cfg, dtype=jnp.bfloat16)))
    assert ModelConfig.from_hf_dict(d) == cfg
    assert d["model_type"] == family and d["torch_dtype"] == "bfloat16"
    # the transformers<5 spelling alone reads back the same config
    old = {k: v for k, v in d.items() if k != "rope_parameters"}
    assert ModelConfig.from_hf_dict(old) == cfg


def test_explicit_longrope_factors_and_sliding_window_round_trip():
    cfg = dataclasses.replace(
        CONFIGS["phi3"], rope_factor=4.0, rope_attention_factor=1.25, sliding_window=16
    )
    d = hf_config_dict(cfg)
    assert d["rope_parameters"]["attention_factor"] == 1.25 and d["sliding_window"] == 16
    assert ModelConfig.from_hf_dict(json.loads(json.dumps(d))) == cfg


def test_configs_transformers_cannot_express_are_refused(tmp_path):
    cfg = tiny_model_config("phi3", **FAMILY_MODEL, head_dim=16)
    with pytest.raises(ValueError, match="head_dim 16 != hidden_size/num_heads"):
        hf_config_dict(cfg)
    cfg = dataclasses.replace(CONFIGS["llama"], sliding_window=8)
    with pytest.raises(ValueError, match="llama config: sliding_window=8"):
        hf_config_dict(cfg)
    with pytest.raises(ValueError, match="llama config: sliding_window=8"):
        save_hf(_params(cfg), cfg, tmp_path / "sub" / "m", progress=False)
    assert not (tmp_path / "sub").exists()


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_save_then_load_is_exact(tmp_path, family):
    cfg = CONFIGS[family]
    params = _params(cfg)
    out = save_hf(params, cfg, tmp_path / "m", progress=False)
    files = {"config.json", "model.safetensors"} | (
        {"generation_config.json"} if cfg.eos_token_ids else set()
    )
    assert set(os.listdir(out)) == files
    cfg2, back = load_hf_params(out, progress=False)
    assert cfg2 == cfg
    _assert_tree_equal(back, params)
    with safe_open(str(out / "model.safetensors"), framework="numpy") as f:
        names = set(f.keys())
        assert f.metadata() == {"format": "pt"}
    assert ("lm_head.weight" in names) == (not cfg.tie_word_embeddings)
    fused = "model.layers.0.self_attn.qkv_proj.weight" in names
    assert fused == (family == "phi3")
    assert ("model.layers.1.self_attn.q_norm.weight" in names) == (family == "qwen3")


def test_dtype_casts_every_tensor(tmp_path):
    cfg = CONFIGS["llama"]
    params = _params(cfg)
    out = save_hf(params, cfg, tmp_path / "m", dtype=jnp.bfloat16, progress=False)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with safe_open(str(out / "model.safetensors"), framework="numpy") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    _, back = load_hf_params(out, dtype=jnp.bfloat16, progress=False)
    _assert_tree_equal(back, jax.tree.map(lambda x: x.astype(jnp.bfloat16), params))


def test_shards_with_an_index_past_max_shard_size(tmp_path):
    cfg = CONFIGS["phi3"]
    params = _params(cfg)
    limit = 20_000  # bytes; the largest tensor (fused gate_up, 96x32 fp32) is 12 KB
    out = save_hf(params, cfg, tmp_path / "m", max_shard_size=limit, progress=False)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    n = len(files)
    assert n > 2 and files == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
    assert not (out / "model.safetensors").exists()
    total = 0
    for fname in files:
        with safe_open(str(out / fname), framework="numpy") as f:
            size = sum(f.get_tensor(k).nbytes for k in f.keys())
            assert set(f.keys()) == {k for k, v in index["weight_map"].items() if v == fname}
        assert size <= limit
        total += size
    assert index["metadata"]["total_size"] == total
    _, back = load_hf_params(out, progress=False)
    _assert_tree_equal(back, params)


def test_parse_size():
    assert parse_size("2GB") == 2 * 10**9 and parse_size("1GiB") == 2**30
    assert parse_size("500mb") == 5 * 10**8 and parse_size(123) == 123
    for bad in ("two GB", 0, "-1GB"):
        with pytest.raises(ValueError, match="max_shard_size"):
            parse_size(bad)


def test_refuses_a_non_empty_directory_unless_overwrite(tmp_path):
    cfg = CONFIGS["llama"]
    params = _params(cfg)
    out = tmp_path / "m"
    out.mkdir()
    save_hf(params, cfg, out, progress=False)  # an empty directory is fine
    with pytest.raises(FileExistsError, match=r"m: directory exists and is not empty.*overwrite"):
        save_hf(params, cfg, out, progress=False)
    (out / "stale.bin").write_bytes(b"x")
    save_hf(params, cfg, out, overwrite=True, progress=False)
    assert not (out / "stale.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp or backup left
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        save_hf(params, cfg, tmp_path / "f", progress=False)


def test_a_failure_midway_leaves_the_old_directory_and_no_temp(tmp_path, monkeypatch):
    cfg = CONFIGS["llama"]
    params = _params(cfg)
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("old model")
    calls = []

    def failing_save(tensors, path, metadata=None):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        from safetensors.numpy import save_file

        save_file(tensors, path, metadata=metadata)

    monkeypatch.setattr(hf_export, "save_file", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_hf(params, cfg, out, max_shard_size=4000, overwrite=True, progress=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    with pytest.raises(OSError, match="disk full"):
        calls.clear()
        save_hf(params, cfg, tmp_path / "new", max_shard_size=4000, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_params_that_do_not_match_the_config_name_the_parameter(tmp_path):
    cfg = CONFIGS["qwen3"]
    params = _params(cfg)
    bad = {**params, "layers": {**params["layers"], "k": params["layers"]["k"][:, :, :8]}}
    with pytest.raises(ValueError, match=r"params\['layers'\]\['k'\] has shape \(2, 32, 8\)"):
        save_hf(bad, cfg, tmp_path / "m", progress=False)
    missing = {**params, "layers": {k: v for k, v in params["layers"].items() if k != "q_norm"}}
    with pytest.raises(ValueError, match=r"missing \['q_norm'\]"):
        save_hf(missing, cfg, tmp_path / "m", progress=False)
    assert not (tmp_path / "m").exists()


def _tiny_tokenizer() -> Tokenizer:
    """A trained byte-level BPE with chat specials; adds BOS like Llama tokenizers do."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 5, trainer)
    template = (
        "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + "
        "'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}"
        "{% endif %}"
    )
    return Tokenizer(
        backend,
        chat_template=template,
        special_tokens={"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
        eos_token_ids=[2, 0],
        pad_token_id=None,
        bos_token_id=1,
        add_bos_token=True,
    )


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the fox?"}]
TEXTS = ["the quick fox", "<|im_start|>user\nlazy dog 123<|im_end|>", "émoji 🙂\tx"]


def test_tokenizer_files_round_trip_through_our_loader(tmp_path):
    tok = _tiny_tokenizer()
    cfg = CONFIGS["llama"]
    out = save_hf(_params(cfg), cfg, tmp_path / "m", tokenizer=tok, progress=False)
    config = json.loads((out / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (
        1,
        [2, 0],
        None,
    )
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen == {"bos_token_id": 1, "eos_token_id": [2, 0]}
    back = Tokenizer.from_hf_dir(out)
    assert back.eos_token_ids == (2, 0) and back.bos_token_id == 1
    assert back.apply_chat_template(MESSAGES) == tok.apply_chat_template(MESSAGES)
    for text in TEXTS:
        for special in (False, True):
            assert back.encode(text, special) == tok.encode(text, special)


def test_transformers_reads_the_tokenizer_and_chat_template(tmp_path):
    tr = pytest.importorskip("transformers", reason="transformers is the oracle (test extra)")
    tok = _tiny_tokenizer()
    cfg = CONFIGS["llama"]
    out = save_hf(_params(cfg), cfg, tmp_path / "m", tokenizer=tok, progress=False)
    theirs = tr.AutoTokenizer.from_pretrained(str(out))
    assert theirs.apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True
    ) == tok.apply_chat_template(MESSAGES)
    assert theirs.eos_token == "<|im_end|>" and theirs.bos_token == "<|im_start|>"
    for text in TEXTS:
        assert theirs.encode(text, add_special_tokens=True) == tok.encode(text, True)
        assert theirs.encode(text, add_special_tokens=False) == tok.encode(text)
        ids = tok.encode(text)
        assert theirs.decode(ids, skip_special_tokens=True) == tok.decode(ids)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_transformers_gives_our_logits(tmp_path, family):
    torch = pytest.importorskip("torch", reason="transformers (PyTorch) is the oracle")
    tr = pytest.importorskip("transformers", reason="transformers is the oracle (test extra)")
    cfg = CONFIGS[family]
    params = _params(cfg, seed=1)
    # phi3 also goes through the sharded path, which transformers must read the same way
    shard = 20_000 if family == "phi3" else "2GB"
    out = save_hf(params, cfg, tmp_path / "m", max_shard_size=shard, progress=False)
    model = tr.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    model.eval()
    assert type(model).__name__ == hf_config_dict(cfg)["architectures"][0]
    for ids in IDS.values():
        ours = np.asarray(jit_forward(params, cfg, jnp.asarray(ids)).logits)
        with torch.no_grad():
            theirs = model(torch.from_numpy(ids.astype(np.int64))).logits.numpy()
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


def test_sharded_params_on_a_mesh_are_written_one_layer_at_a_time(tmp_path):
    from coevo_jax.parallel import make_mesh
    from coevo_jax.parallel.rules import shard_params

    cfg = CONFIGS["phi3"]
    params = _params(cfg)
    placed = shard_params(params, make_mesh(data=2, fsdp=2, tensor=2))
    assert len(placed["layers"]["q"].addressable_shards) == 8
    out = save_hf(placed, cfg, tmp_path / "m", progress=False)
    _, back = load_hf_params(out, progress=False)
    _assert_tree_equal(back, params)


@pytest.mark.slow  # importing vLLM takes ~30 s here
def test_vllm_reads_the_config_of_each_family(tmp_path):
    pytest.importorskip("torch", reason="vLLM needs torch (test extra)")
    vllm_config = pytest.importorskip(
        "vllm.transformers_utils.config", reason="vllm==0.33.0 --no-deps (installed by .ci/run)"
    )
    for family, cfg in CONFIGS.items():
        out = save_hf(_params(cfg), cfg, tmp_path / family, progress=False)
        theirs = vllm_config.get_config(str(out), trust_remote_code=False)
        assert type(theirs).__name__ == hf_config_dict(cfg)["architectures"][0].replace(
            "ForCausalLM", "Config"
        )
        assert theirs.rope_parameters["rope_type"] == cfg.rope_type
        assert theirs.rope_parameters["rope_theta"] == cfg.rope_theta
        assert theirs.head_dim == cfg.head_dim
        assert theirs.tie_word_embeddings == cfg.tie_word_embeddings
