"""Load a llama.cpp GGUF file into the decoder's params pytree, its config and its tokenizer.

Reading and dequantising are the numpy-only ``gguf`` package's job
(``GGUFReader`` + ``gguf.quants.dequantize``). What is written here:

* the llama.cpp tensor names -> the params layout of ``docs/interfaces.md``: matrices
  transposed to ``[in, out]``, layers stacked on a leading axis;
* undoing llama.cpp's q/k row permutation (llama architecture only): llama.cpp reorders each
  head's rows from the HF "rotate half" layout to interleaved pairs; a per-head reshape and
  swap of the two halves restores the HF layout, after which every tensor equals what
  transformers builds from the same file;
* the GGUF metadata -> an HF ``config.json``-style dict, handed to
  ``ModelConfig.from_hf_dict`` so GGUF and HF loading share one config path.

Opening the file and decoding its metadata (``read_metadata``, ``GGUFError``) live in
:mod:`coevo_jax.models.gguf_file`, which the tokenizer imports too; they are re-exported here.

Supported architectures: ``llama`` and ``qwen3``. Phi-3 GGUFs (fused qkv, long-rope factor
tensors) and llama-3.1-style ``rope_freqs`` are refused with a clear error; load those models
from their HF directories.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.models.config import ModelConfig
from coevo_jax.models.gguf_file import (
    GGUF_MAGIC,
    GGUFError,
    check_gguf,
    field_value,
    open_reader,
    read_metadata,
)
from coevo_jax.models.tokenizer import Tokenizer

__all__ = [
    "GGUF_MAGIC",
    "GGUFError",
    "SUPPORTED_ARCHITECTURES",
    "hf_config_from_metadata",
    "load_gguf",
    "load_gguf_arrays",
    "read_metadata",
    "unpermute_qk",
]

SUPPORTED_ARCHITECTURES = ("llama", "qwen3")

# per-layer llama.cpp suffix -> (params key, is a matrix to transpose)
_LAYER_TENSORS = {
    "attn_norm.weight": ("attn_norm", False),
    "attn_q.weight": ("q", True),
    "attn_k.weight": ("k", True),
    "attn_v.weight": ("v", True),
    "attn_output.weight": ("o", True),
    "attn_q_norm.weight": ("q_norm", False),
    "attn_k_norm.weight": ("k_norm", False),
    "ffn_norm.weight": ("mlp_norm", False),
    "ffn_gate.weight": ("gate", True),
    "ffn_up.weight": ("up", True),
    "ffn_down.weight": ("down", True),
}


def hf_config_from_metadata(meta: dict[str, Any], *, tied: bool, source: str = "GGUF") -> dict:
    """An HF ``config.json``-style dict from GGUF metadata.

    Args:
      meta: decoded GGUF key/values.
      tied: whether the file has no ``output.weight`` (embeddings tied to the LM head).
      source: the file name, for error messages.
    """
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFError(
            f"{source}: GGUF architecture {arch!r} is not supported (supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}); load the model from its HF directory."
        )

    def get(key, default=None, *, required=True):
        full = f"{arch}.{key}"
        if full in meta:
            return meta[full]
        if required and default is None:
            raise GGUFError(f"{source}: GGUF metadata lacks {full!r}")
        return default

    scaling = get("rope.scaling.type", "none", required=False)
    if scaling not in ("none", None):
        raise GGUFError(
            f"{source}: RoPE scaling {scaling!r} in a GGUF is not supported; load the model "
            "from its HF directory."
        )
    n_heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    head_dim = int(get("attention.key_length", hidden // n_heads, required=False))
    vocab = get("vocab_size", None, required=False)
    if vocab is None:
        vocab = len(meta.get("tokenizer.ggml.tokens") or [])
    cfg = {
        "model_type": arch,
        "architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "LlamaForCausalLM"],
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": n_heads,
        "num_key_value_heads": int(get("attention.head_count_kv", n_heads, required=False)),
        "head_dim": head_dim,
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(get("rope.freq_base", 10000.0, required=False)),
        "max_position_embeddings": int(get("context_length", 2048, required=False)),
        "tie_word_embeddings": bool(tied),
        "hidden_act": "silu",
        "attention_bias": False,
        "rope_scaling": None,
    }
    if meta.get("tokenizer.ggml.bos_token_id") is not None:
        cfg["bos_token_id"] = int(meta["tokenizer.ggml.bos_token_id"])
    if meta.get("tokenizer.ggml.eos_token_id") is not None:
        cfg["eos_token_id"] = int(meta["tokenizer.ggml.eos_token_id"])
    return cfg


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a q or k weight in torch layout ``[out, in]``.

    Within each head llama.cpp stores rows as ``(d/2, 2)`` interleaved pairs; HF stores them as
    two halves ``(2, d/2)``. ``n_heads`` is the query head count for q, the KV head count for k.
    """
    out, d_in = w.shape
    half = out // n_heads // 2
    return w.reshape(n_heads, half, 2, d_in).swapaxes(1, 2).reshape(out, d_in)


def load_gguf_arrays(path: str | os.PathLike, *, dtype=np.float32):
    """``(hf_config_dict, params as numpy arrays, metadata)`` from a GGUF file.

    The arrays are dequantised, un-permuted, transposed to ``[in, out]`` and stacked over layers,
    in ``dtype`` (numpy or ml_dtypes dtype). Callers that place arrays on devices with a sharding
    (``coevo_jax.models.load``) start from this.

    Raises:
      FileNotFoundError: no such file.
      GGUFError: not a GGUF, unreadable, unsupported architecture, missing or misshapen tensor;
        the message names the file and the tensor.
    """
    import gguf

    path = check_gguf(path)
    reader = open_reader(path)
    meta = {name: field_value(field) for name, field in reader.fields.items()}
    tensors = {t.name: t for t in reader.tensors}
    if "rope_freqs.weight" in tensors:
        raise GGUFError(
            f"{path}: has a 'rope_freqs.weight' tensor (llama-3.1 RoPE scaling), which GGUF "
            "loading does not support; load the model from its HF directory."
        )
    cfg = hf_config_from_metadata(meta, tied="output.weight" not in tensors, source=path)
    arch = cfg["model_type"]
    n_layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    n_heads, n_kv, head_dim = (
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["head_dim"],
    )
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    expected = {  # torch layout [out, in] for matrices
        "attn_norm": (hidden,),
        "q": (n_heads * head_dim, hidden),
        "k": (n_kv * head_dim, hidden),
        "v": (n_kv * head_dim, hidden),
        "o": (hidden, n_heads * head_dim),
        "q_norm": (head_dim,),
        "k_norm": (head_dim,),
        "mlp_norm": (hidden,),
        "gate": (inter, hidden),
        "up": (inter, hidden),
        "down": (hidden, inter),
    }
    needed = [k for k in expected if arch == "qwen3" or k not in ("q_norm", "k_norm")]

    def fetch(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in tensors:
            raise GGUFError(f"{path}: tensor {name!r} is missing")
        t = tensors[name]
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise GGUFError(
                f"{path}: tensor {name!r} has quantisation {t.tensor_type.name}, which the "
                f"gguf package cannot dequantise ({e})"
            ) from e
        w = np.asarray(w, dtype=np.float32)
        if w.shape != shape:
            raise GGUFError(
                f"{path}: tensor {name!r} has shape {w.shape}, expected {shape} from the "
                "file's metadata"
            )
        return w

    layers: dict[str, list[np.ndarray]] = {k: [] for k in needed}
    suffix_of = {key: suffix for suffix, (key, _) in _LAYER_TENSORS.items()}
    for layer in range(n_layers):
        for key in needed:
            w = fetch(f"blk.{layer}.{suffix_of[key]}", expected[key])
            if arch == "llama" and key in ("q", "k"):
                w = unpermute_qk(w, n_heads if key == "q" else n_kv)
            if _LAYER_TENSORS[suffix_of[key]][1]:
                w = w.T
            layers[key].append(w.astype(dtype))
    params: dict[str, Any] = {
        "embed": fetch("token_embd.weight", (vocab, hidden)).astype(dtype),
        "layers": {k: np.stack(v) for k, v in layers.items()},
        "final_norm": fetch("output_norm.weight", (hidden,)).astype(dtype),
    }
    if not cfg["tie_word_embeddings"]:
        params["lm_head"] = np.ascontiguousarray(fetch("output.weight", (vocab, hidden)).T).astype(
            dtype
        )
    return cfg, params, meta


def load_gguf(path: str | os.PathLike, *, dtype=None):
    """``(ModelConfig, params, Tokenizer)`` from a llama.cpp GGUF file.

    Args:
      path: the ``.gguf`` file.
      dtype: parameter dtype (default float32). Weights are dequantised to float32 first, then
        cast.

    Returns:
      ``config``: ``coevo_jax.models.config.ModelConfig`` built with ``from_hf_dict``;
      ``params``: the pytree of ``docs/interfaces.md`` as ``jax.Array`` on the default device
      (``[in, out]`` matrices, layers stacked); ``tokenizer``: the byte-level BPE tokenizer with
      the file's chat template.
    """
    np_dtype = np.dtype(jnp.float32 if dtype is None else dtype)
    hf_cfg, arrays, meta = load_gguf_arrays(path, dtype=np_dtype)
    config = ModelConfig.from_hf_dict(hf_cfg, source=os.fspath(path))
    params = jax.tree_util.tree_map(jnp.asarray, arrays)
    tokenizer = Tokenizer.from_gguf_metadata(meta, source=os.fspath(path))
    return config, params, tokenizer
