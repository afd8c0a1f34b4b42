"""Reads an HF model directory (``config.json`` + safetensors, single or sharded) into params.

Parameters are built one at a time: the per-layer checkpoint tensors of one parameter are read
(only the rows needed, through safetensors' lazy slices, which is how Phi-3's fused
``qkv_proj``/``gate_up_proj`` are split without reading them three times), transposed to
``[in, out]``, stacked on the layer axis into one host buffer, cast, and placed, with its
NamedSharding when a mesh is given (each device receives only its shard). Peak host memory is
therefore one parameter, not the model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy so safetensors can return it)
import numpy as np
from safetensors import safe_open
from tqdm.auto import tqdm

from coevo_jax._errors import UserError
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import Params, param_shapes
from coevo_jax.parallel.rules import param_shardings, place

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class ModelLoadError(UserError, ValueError):
    """A model file is missing, unreadable or does not match its config; names file and tensor."""


def read_config(model_dir: str | os.PathLike) -> ModelConfig:
    """``ModelConfig`` from ``<model_dir>/config.json``; errors name that file."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ModelLoadError(f"{path}: not found (an HF model directory needs config.json)")
    return read_config_file(path)


def read_config_file(path: str | os.PathLike) -> ModelConfig:
    """``ModelConfig`` from an HF ``config.json`` file, wherever it lies (a model directory,
    or the server's ``--random-config``); every error names the file.

    Raises:
      ModelLoadError: no such file, not JSON, not a JSON object.
      ModelConfigError, UnsupportedModelError: see ``ModelConfig.from_hf_dict``.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model config not found: {path}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return ModelConfig.from_hf_dict(data, source=str(path))


class _Checkpoint:
    """Name -> (file, lazy handle) over one or many safetensors shards."""

    def __init__(self, model_dir: Path):
        index = model_dir / INDEX_FILE
        single = model_dir / SINGLE_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
                raise ModelLoadError(f"{index}: not a valid safetensors index ({e})") from e
            self.files = {name: model_dir / fname for name, fname in weight_map.items()}
            self.source = index
        elif single.is_file():
            self.files = None
            self._single = single
            self.source = single
        else:
            extra = (
                " (found PyTorch .bin weights: convert them to safetensors)"
                if any(model_dir.glob("*.bin"))
                else ""
            )
            raise ModelLoadError(f"{model_dir}: no {SINGLE_FILE} or {INDEX_FILE}{extra}")
        self._handles: dict[Path, Any] = {}
        if self.files is None:
            self.names = set(self._open(self._single).keys())
        else:
            self.names = set(self.files)

    def _open(self, path: Path) -> Any:
        if path not in self._handles:
            if not path.is_file():
                raise ModelLoadError(f"{path}: not found (listed in {INDEX_FILE})")
            try:
                self._handles[path] = safe_open(str(path), framework="numpy")
            except Exception as e:  # safetensors raises its own error type for bad headers
                raise ModelLoadError(
                    f"{path}: not a valid safetensors file (truncated or corrupt?): {e}"
                ) from e
        return self._handles[path]

    def file_of(self, name: str) -> Path:
        return self._single if self.files is None else self.files[name]

    def read(self, name: str, expect: tuple[int, ...], rows: slice | None = None) -> np.ndarray:
        """Tensor ``name`` (torch layout), checked against ``expect``; ``rows`` slices axis 0."""
        if name not in self.names:
            raise ModelLoadError(f"{self.source}: tensor {name!r} missing from the checkpoint")
        path = self.file_of(name)
        try:
            sl = self._open(path).get_slice(name)
            shape = tuple(sl.get_shape())
            if shape != expect:
                raise ModelLoadError(
                    f"{path}: tensor {name!r} has shape {shape}, config.json implies {expect}"
                )
            out = sl[rows] if rows is not None else sl[:]
        except ModelLoadError:
            raise
        except Exception as e:
            raise ModelLoadError(
                f"{path}: cannot read tensor {name!r} (truncated or corrupt?): {e}"
            ) from e
        return np.asarray(out)


def _sources(cfg: ModelConfig, prefix: str) -> dict[str, Callable[[_Checkpoint, int], np.ndarray]]:
    """For each per-layer parameter, a reader of layer ``l`` in our ``[in, out]`` layout."""
    H, D, Inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    nq, nkv = cfg.num_heads * D, cfg.num_kv_heads * D
    layer = prefix + "layers.{}."

    def mat(suffix: str, shape: tuple[int, int], rows: slice | None = None):
        def read(ck: _Checkpoint, i: int) -> np.ndarray:
            return ck.read(layer.format(i) + suffix, shape, rows).T

        return read

    def vec(suffix: str, n: int):
        return lambda ck, i: ck.read(layer.format(i) + suffix, (n,))

    src = {
        "attn_norm": vec("input_layernorm.weight", H),
        "mlp_norm": vec("post_attention_layernorm.weight", H),
        "o": mat("self_attn.o_proj.weight", (H, nq)),
        "down": mat("mlp.down_proj.weight", (H, Inter)),
    }
    if cfg.family == "phi3":
        fused = (nq + 2 * nkv, H)
        src["q"] = mat("self_attn.qkv_proj.weight", fused, slice(0, nq))
        src["k"] = mat("self_attn.qkv_proj.weight", fused, slice(nq, nq + nkv))
        src["v"] = mat("self_attn.qkv_proj.weight", fused, slice(nq + nkv, nq + 2 * nkv))
        src["gate"] = mat("mlp.gate_up_proj.weight", (2 * Inter, H), slice(0, Inter))
        src["up"] = mat("mlp.gate_up_proj.weight", (2 * Inter, H), slice(Inter, 2 * Inter))
    else:
        src["q"] = mat("self_attn.q_proj.weight", (nq, H))
        src["k"] = mat("self_attn.k_proj.weight", (nkv, H))
        src["v"] = mat("self_attn.v_proj.weight", (nkv, H))
        src["gate"] = mat("mlp.gate_proj.weight", (Inter, H))
        src["up"] = mat("mlp.up_proj.weight", (Inter, H))
    if cfg.qk_norm:
        src["q_norm"] = vec("self_attn.q_norm.weight", D)
        src["k_norm"] = vec("self_attn.k_norm.weight", D)
    return src


def load_hf_params(
    model_dir: str | os.PathLike,
    cfg: ModelConfig | None = None,
    *,
    dtype: Any = jnp.float32,
    mesh: jax.sharding.Mesh | None = None,
    progress: bool = True,
) -> tuple[ModelConfig, Params]:
    """Reads the weights of an HF directory into the params pytree.

    Args:
      model_dir: directory with ``config.json`` and ``model.safetensors`` or a sharded
        ``model.safetensors.index.json``.
      cfg: the config, when already read.
      dtype: parameter dtype (weights are cast from whatever the checkpoint stores).
      mesh: place each parameter with its partition-rule sharding on this mesh; None = the
        default device.
      progress: show a tqdm bar (on terminals only).

    Returns:
      ``(config, params)``.

    Raises:
      ModelLoadError: missing or unreadable files, a missing tensor, a shape mismatch; the
        message names the file and the tensor.
    """
    model_dir = Path(model_dir)
    cfg = read_config(model_dir) if cfg is None else cfg
    ck = _Checkpoint(model_dir)
    prefix = "model." if "model.embed_tokens.weight" in ck.names else ""
    np_dtype = np.dtype(dtype)
    shapes = param_shapes(cfg)
    sources = _sources(cfg, prefix)

    shardings = None
    if mesh is not None:
        shardings = param_shardings(
            jax.tree.map(np.empty, shapes, is_leaf=lambda s: isinstance(s, tuple)), mesh
        )

    def put(host: np.ndarray, sharding: Any) -> jax.Array:
        if sharding is None:
            return jax.device_put(host)
        return place(host, sharding)

    def top(name: str, reader: Callable[[], np.ndarray]) -> jax.Array:
        host = reader().astype(np_dtype)
        return put(host, None if shardings is None else shardings[name])

    V, H = cfg.vocab_size, cfg.hidden_size
    names = list(shapes["layers"])
    bar = tqdm(
        total=len(names) + 3,
        desc=f"loading {model_dir.name}",
        unit="tensor",
        disable=not progress or None,
    )
    params: Params = {"layers": {}}
    params["embed"] = top("embed", lambda: ck.read(prefix + "embed_tokens.weight", (V, H)))
    bar.update()
    for name in names:
        host = np.empty(shapes["layers"][name], np_dtype)
        for i in range(cfg.num_layers):
            host[i] = sources[name](ck, i)
        params["layers"][name] = put(host, None if shardings is None else shardings["layers"][name])
        del host
        bar.update()
    params["final_norm"] = top("final_norm", lambda: ck.read(prefix + "norm.weight", (H,)))
    bar.update()
    if not cfg.tie_word_embeddings:
        params["lm_head"] = top("lm_head", lambda: ck.read("lm_head.weight", (V, H)).T)
    bar.update()
    bar.close()
    return cfg, params
