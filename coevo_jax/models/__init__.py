"""Decoders (Llama, Qwen3, Phi-3 families), weight loading, tokenizer and sampler.

``forward`` is the pure forward pass over a params pytree; ``Decoder`` the NNX module around
it; ``load`` reads an HF directory, a GGUF file or a Hub id (``resolve_model``) into
``(Decoder, Tokenizer | None)``;
``save_hf`` writes params back as an HF directory; ``sharded_forward`` runs ``forward`` on a
mesh.
"""

from __future__ import annotations

import importlib
from typing import Any

from coevo_jax.models.config import ModelConfig, ModelConfigError, UnsupportedModelError
from coevo_jax.models.decoder import (
    Decoder,
    DecoderOutput,
    KVCache,
    forward,
    init_params,
    jit_forward,
    param_shapes,
)
from coevo_jax.models.sharded import sharded_forward

__all__ = [
    "Decoder",
    "DecoderOutput",
    "HubModelError",
    "KVCache",
    "ModelConfig",
    "ModelConfigError",
    "ModelLoadError",
    "UnsupportedModelError",
    "default_model_path",
    "export_merged",
    "forward",
    "init_params",
    "jit_forward",
    "load",
    "param_shapes",
    "resolve_model",
    "save_hf",
    "hf_config_dict",
    "sharded_forward",
]

# Loading pulls in safetensors/tqdm and the GGUF reader; keep `import coevo_jax.models` light.
_LAZY = {
    "load": ("coevo_jax.models.loading", "load"),
    "ModelLoadError": ("coevo_jax.models.hf_loader", "ModelLoadError"),
    "HubModelError": ("coevo_jax.models.hub", "HubModelError"),
    "resolve_model": ("coevo_jax.models.hub", "resolve_model"),
    "default_model_path": ("coevo_jax.models.default", "default_model_path"),
    "save_hf": ("coevo_jax.models.hf_export", "save_hf"),
    "export_merged": ("coevo_jax.models.hf_export", "export_merged"),
    "hf_config_dict": ("coevo_jax.models.hf_export", "hf_config_dict"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'coevo_jax.models' has no attribute {name!r}")
