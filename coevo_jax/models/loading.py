"""``load``: the one entry point from a path on disk to ``(Decoder, Tokenizer | None)``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import Decoder
from coevo_jax.models.hf_loader import ModelLoadError, load_hf_params, read_config
from coevo_jax.parallel.rules import shard_params


def _hf_tokenizer(model_dir: Path) -> Any:
    try:
        from coevo_jax.models.tokenizer import Tokenizer
    except ImportError:  # the tokenizer module is optional for weight-only use
        return None
    return Tokenizer.from_hf_dir(str(model_dir))


def load(
    path: str | os.PathLike,
    *,
    dtype: Any = jnp.float32,
    mesh: jax.sharding.Mesh | None = None,
    progress: bool = True,
) -> tuple[Decoder, Any]:
    """Loads a decoder and its tokenizer.

    Args:
      path: an HF model directory (``config.json`` + ``model.safetensors`` or a sharded
        ``model.safetensors.index.json``; tokenizer files optional) or a ``.gguf`` file.
      dtype: parameter dtype (float32 or bfloat16).
      mesh: when given, every parameter is placed with its partition-rule sharding on it
        (``coevo_jax.parallel``); otherwise on the default device.
      progress: a progress bar while tensors load (terminals only).

    Returns:
      ``(model, tokenizer)``: ``model(input_ids, attention_mask=None)`` gives an output whose
      ``.logits`` is ``[B, T, V]``; the tokenizer (with chat template) is None when an HF
      directory has no tokenizer files.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ModelLoadError: unreadable/truncated files, missing tensors, shape mismatches.
      UnsupportedModelError: an architecture outside Llama / Qwen3 / Phi-3.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"model path not found: {p}")
    if p.is_dir():
        cfg = read_config(p)
        cfg, params = load_hf_params(p, cfg, dtype=dtype, mesh=mesh, progress=progress)
        return Decoder(cfg, params), _hf_tokenizer(p)
    if p.suffix == ".gguf":
        # deferred (here and below): a GGUF brings its tokenizer (jinja2, tokenizers), which
        # HF weight-only loading does without (see _hf_tokenizer)
        if mesh is None:
            from coevo_jax.models.gguf import load_gguf

            cfg, params, tokenizer = load_gguf(p, dtype=dtype)
            params = jax.tree.map(lambda a: jnp.asarray(a, dtype), params)
            return Decoder(cfg, params), tokenizer
        # Host arrays straight to their shards: a model too big for one device never lands
        # whole on the default device first.
        from coevo_jax.models.gguf import load_gguf_arrays
        from coevo_jax.models.tokenizer import Tokenizer

        hf_cfg, arrays, meta = load_gguf_arrays(p, dtype=np.dtype(dtype))
        cfg = ModelConfig.from_hf_dict(hf_cfg, source=os.fspath(p))
        tokenizer = Tokenizer.from_gguf_metadata(meta, source=os.fspath(p))
        return Decoder(cfg, shard_params(arrays, mesh)), tokenizer
    if p.name == "config.json":
        return load(p.parent, dtype=dtype, mesh=mesh, progress=progress)
    raise ModelLoadError(f"{p}: expected an HF model directory or a .gguf file")
