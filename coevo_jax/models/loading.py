"""``load``: the one entry point from a model reference (a path on disk, ``default`` or a
Hugging Face Hub id) to ``(Decoder, Tokenizer | None)``."""

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
from coevo_jax.models.hub import resolve_model
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
        ``model.safetensors.index.json``; tokenizer files optional), a ``.gguf`` file,
        ``"default"`` (the embedded SmolLM2 GGUF) or a Hugging Face Hub id ``org/name``
        (fetched into the Hub cache, or found there when ``HF_HUB_OFFLINE`` is set; see
        ``coevo_jax.models.hub``). An existing local path wins over a Hub id.
      dtype: parameter dtype (float32 or bfloat16).
      mesh: when given, every parameter is placed with its partition-rule sharding on it
        (``coevo_jax.parallel``) as it is read, each device receiving only its shard;
        otherwise on the default device. HF safetensors are read one file at a time (see
        ``coevo_jax.models.hf_loader`` for the memory bounds).
      progress: a progress bar while tensors load (terminals only).

    Returns:
      ``(model, tokenizer)``: ``model(input_ids, attention_mask=None)`` gives an output whose
      ``.logits`` is ``[B, T, V]``; the tokenizer (with chat template) is None when an HF
      directory has no tokenizer files.

    Raises:
      FileNotFoundError: ``path`` does not exist and is not shaped like a Hub id.
      HubModelError: a Hub id that is not cached while offline, or cannot be fetched.
      ModelLoadError: unreadable/truncated files, missing tensors, shape mismatches.
      UnsupportedModelError: an architecture outside Llama / Qwen3 / Phi-3.
    """
    p = resolve_model(path)
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
