"""Reads an HF model directory (``config.json`` + safetensors, single or sharded) into params,
each tensor placed straight into its final sharding.

The checkpoint is read one safetensors file at a time, each closed (unmapped) before the next
is opened. Each tensor is cut into the pieces it fills (one, or Phi-3's fused ``qkv_proj`` /
``gate_up_proj``: three / two row ranges), and each piece is read in blocks of rows,
transposed to ``[in, out]`` and cast into one host array in the load dtype, which is put on
the devices with its parameter's NamedSharding (``coevo_jax.parallel.rules``), each device
receiving only its own shard (``parallel.place``), and then dropped. A per-layer piece goes
into its stacked ``[L, ...]`` parameter in place: the stacked parameter is allocated once on
the devices with its final sharding, and each layer is written into it by a jitted update
that donates the old buffer (the layer axis is never split, so each device updates its own
shard locally).

Bounds. Host memory beyond the placed parameters: the pages of the one file being read that
safetensors' memory map has touched (at most that file), plus one piece in the load dtype
(at most the largest checkpoint tensor, e.g. the ``[V, H]`` LM head) and one block of rows of
at most ``_BLOCK_BYTES`` (16 MiB). There is no host copy of the model, of a stacked
parameter, or of a parameter per device. Device memory: the final parameters plus one layer
of one parameter. On a CPU backend the "devices" are host memory, so there the placed
parameters count towards the process's RSS too; ``benchmarks/bench_load.py`` measures the
peak against this bound. The jitted update compiles once per parameter shape and sharding.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy so safetensors can return it)
import numpy as np
from jax.sharding import NamedSharding, Sharding
from jax.sharding import PartitionSpec as P
from safetensors import safe_open
from tqdm.auto import tqdm

from coevo_jax._errors import UserError
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import Params, param_shapes
from coevo_jax.parallel.rules import param_shardings, place

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
# Rows of a checkpoint matrix are read this many bytes at a time (see _read_piece).
_BLOCK_BYTES = 16 * 2**20
# ...and transposed this many rows at a time: numpy's transposing copy of a whole block
# strides through memory; in strips it ran 2-3x faster on the development machine.
_TILE_ROWS = 64


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


class _Piece(NamedTuple):
    """Where (part of) a checkpoint tensor goes: parameter ``param`` (``"embed"``,
    ``"layers/q"``, ...), at ``layer`` of the stack (None: an unstacked parameter), from
    rows ``rows`` of the torch tensor (None: all), transposed to ``[in, out]`` if ``transpose``."""

    param: str
    layer: int | None
    rows: slice | None = None
    transpose: bool = False


class _Checkpoint:
    """The safetensors files of a model directory: which tensor lies in which file."""

    def __init__(self, model_dir: Path):
        index = model_dir / INDEX_FILE
        single = model_dir / SINGLE_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
                self.file_of = {str(k): model_dir / str(v) for k, v in weight_map.items()}
            except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise ModelLoadError(f"{index}: not a valid safetensors index ({e})") from e
            self.source = index
        elif single.is_file():
            with self.open(single) as f:
                self.file_of = dict.fromkeys(f.keys(), single)
            self.source = single
        else:
            extra = (
                " (found PyTorch .bin weights: convert them to safetensors)"
                if any(model_dir.glob("*.bin"))
                else ""
            )
            raise ModelLoadError(f"{model_dir}: no {SINGLE_FILE} or {INDEX_FILE}{extra}")

    def require(self, names: Iterable[str]) -> None:
        """Fails, before anything is read, on the first of ``names`` the checkpoint lacks."""
        for name in names:
            if name not in self.file_of:
                raise ModelLoadError(f"{self.source}: tensor {name!r} missing from the checkpoint")

    def files(self, names: set[str]) -> list[tuple[Path, list[str]]]:
        """``(file, the names of ``names`` in it)`` per file, files in name order."""
        by_file: dict[Path, list[str]] = {}
        for name in sorted(names):
            by_file.setdefault(self.file_of[name], []).append(name)
        return sorted(by_file.items())

    @staticmethod
    def open(path: Path) -> Any:
        """A safetensors handle (a context manager: leaving it unmaps the file)."""
        if not path.is_file():
            raise ModelLoadError(f"{path}: not found (listed in {INDEX_FILE})")
        try:
            return safe_open(str(path), framework="numpy")
        except Exception as e:  # safetensors raises its own error type for bad headers
            raise ModelLoadError(
                f"{path}: not a valid safetensors file (truncated or corrupt?): {e}"
            ) from e

    @staticmethod
    def read_piece(
        handle: Any, path: Path, name: str, expect: tuple[int, ...], piece: _Piece, dtype
    ) -> np.ndarray:
        """``piece`` of tensor ``name`` of the open file ``path``, checked against the torch
        shape ``expect``, in our layout and ``dtype`` (see :func:`_read_piece`)."""
        try:
            sl = handle.get_slice(name)
            shape = tuple(sl.get_shape())
            if shape != expect:
                raise ModelLoadError(
                    f"{path}: tensor {name!r} has shape {shape}, config.json implies {expect}"
                )
            return _read_piece(sl, shape, piece, dtype)
        except ModelLoadError:
            raise
        except Exception as e:
            raise ModelLoadError(
                f"{path}: cannot read tensor {name!r} (truncated or corrupt?): {e}"
            ) from e


def _read_piece(sl: Any, shape: tuple[int, ...], piece: _Piece, dtype) -> np.ndarray:
    """``piece`` of the torch-layout tensor behind the lazy safetensors slice ``sl`` (of
    ``shape``: ``[out, in]`` or ``[n]``), as a new C-contiguous array of ``dtype`` in our
    layout (``[in, rows]`` when transposed, else ``[rows, ...]``).

    Matrices are read in blocks of at most ``_BLOCK_BYTES`` (counting 4 bytes an element)
    and written into the result block by block, so that besides the result only one block
    in the checkpoint's dtype is ever in host memory.
    """
    start, stop, _ = (piece.rows or slice(None)).indices(shape[0])
    if len(shape) == 1:
        return np.asarray(sl[start:stop], dtype=dtype)
    n, width = stop - start, shape[1]
    out = np.empty((width, n) if piece.transpose else (n, width), dtype)
    step = max(1, _BLOCK_BYTES // (4 * width))
    for a in range(0, n, step):
        b = min(a + step, n)
        block = sl[start + a : start + b]
        if piece.transpose:
            for c in range(a, b, _TILE_ROWS):
                e = min(c + _TILE_ROWS, b)
                out[:, c:e] = block[c - a : e - a].T
        else:
            out[a:b] = block
    return out


def _plan(cfg: ModelConfig, prefix: str) -> dict[str, tuple[tuple[int, ...], list[_Piece]]]:
    """Checkpoint tensor name -> (its torch shape per ``cfg``, the pieces it fills)."""
    H, D, Inter, V = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size
    nq, nkv = cfg.num_heads * D, cfg.num_kv_heads * D
    plan: dict[str, tuple[tuple[int, ...], list[_Piece]]] = {
        prefix + "embed_tokens.weight": ((V, H), [_Piece("embed", None)]),
        prefix + "norm.weight": ((H,), [_Piece("final_norm", None)]),
    }
    if not cfg.tie_word_embeddings:
        plan["lm_head.weight"] = ((V, H), [_Piece("lm_head", None, transpose=True)])
    # per layer: HF suffix -> (torch shape, [(our name, rows)]); matrices are transposed
    mats: dict[str, tuple[tuple[int, int], list[tuple[str, slice | None]]]] = {
        "self_attn.o_proj.weight": ((H, nq), [("o", None)]),
        "mlp.down_proj.weight": ((H, Inter), [("down", None)]),
    }
    if cfg.family == "phi3":
        mats["self_attn.qkv_proj.weight"] = (
            (nq + 2 * nkv, H),
            [("q", slice(0, nq)), ("k", slice(nq, nq + nkv)), ("v", slice(nq + nkv, None))],
        )
        mats["mlp.gate_up_proj.weight"] = (
            (2 * Inter, H),
            [("gate", slice(0, Inter)), ("up", slice(Inter, None))],
        )
    else:
        mats["self_attn.q_proj.weight"] = ((nq, H), [("q", None)])
        mats["self_attn.k_proj.weight"] = ((nkv, H), [("k", None)])
        mats["self_attn.v_proj.weight"] = ((nkv, H), [("v", None)])
        mats["mlp.gate_proj.weight"] = ((Inter, H), [("gate", None)])
        mats["mlp.up_proj.weight"] = ((Inter, H), [("up", None)])
    vecs = {
        "input_layernorm.weight": ("attn_norm", H),
        "post_attention_layernorm.weight": ("mlp_norm", H),
    }
    if cfg.qk_norm:
        vecs["self_attn.q_norm.weight"] = ("q_norm", D)
        vecs["self_attn.k_norm.weight"] = ("k_norm", D)
    for i in range(cfg.num_layers):
        layer = f"{prefix}layers.{i}."
        for suffix, (shape, parts) in mats.items():
            pieces = [_Piece(f"layers/{ours}", i, rows, True) for ours, rows in parts]
            plan[layer + suffix] = (shape, pieces)
        for suffix, (ours, n) in vecs.items():
            plan[layer + suffix] = ((n,), [_Piece(f"layers/{ours}", i)])
    return plan


def _layer_sharding(stacked: Sharding | None) -> Sharding | None:
    """The sharding of one layer of a stacked parameter sharded as ``stacked``."""
    if not isinstance(stacked, NamedSharding):
        return stacked
    spec = tuple(stacked.spec)
    if spec and spec[0] is not None:
        raise ValueError(f"the stacked layer axis must not be split, got {stacked.spec}")
    return NamedSharding(stacked.mesh, P(*spec[1:]))


@functools.partial(jax.jit, donate_argnums=0)
def _write_layer(stack: jax.Array, layer: jax.Array, i: jax.Array) -> jax.Array:
    """``stack`` (``[L, ...]``) with ``stack[i] = layer``. The old stack is donated, so the
    update happens in place and two copies of a stacked parameter never coexist."""
    return jax.lax.dynamic_update_index_in_dim(stack, layer, i, 0)


class _Placer:
    """Puts pieces on the devices: unstacked parameters whole, stacked ones layer by layer
    into a buffer allocated once with the final sharding."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], shardings: dict[str, Any], dtype):
        self.shapes, self.shardings, self.dtype = shapes, shardings, np.dtype(dtype)
        self.out: dict[str, jax.Array] = {}

    def _put(self, host: np.ndarray, sharding: Sharding | None) -> jax.Array:
        return jax.device_put(host) if sharding is None else place(host, sharding)

    def add(self, piece: _Piece, host: np.ndarray) -> None:
        """Places ``host``, ``piece`` in our layout and dtype (one layer of a stacked
        parameter, or an unstacked one whole)."""
        sharding = self.shardings[piece.param]
        if piece.layer is None:
            self.out[piece.param] = self._put(host, sharding)
            return
        if piece.param not in self.out:
            self.out[piece.param] = jnp.zeros(self.shapes[piece.param], self.dtype, device=sharding)
        layer = self._put(host, _layer_sharding(sharding))
        self.out[piece.param] = _write_layer(self.out[piece.param], layer, piece.layer)

    def params(self) -> Params:
        """The placed params pytree (``{"embed", "layers": {...}, "final_norm", ...}``)."""
        out: Params = {"layers": {}}
        for name, arr in self.out.items():
            group, _, leaf = name.partition("/")
            if leaf:
                out[group][leaf] = arr
            else:
                out[name] = arr
        return out


def _flat(tree: Params) -> dict[str, Any]:
    """``{"embed": x, "layers/q": y, ...}`` of a params-shaped tree."""
    flat = {k: v for k, v in tree.items() if k != "layers"}
    flat.update({f"layers/{k}": v for k, v in tree["layers"].items()})
    return flat


def load_hf_params(
    model_dir: str | os.PathLike,
    cfg: ModelConfig | None = None,
    *,
    dtype: Any = jnp.float32,
    mesh: jax.sharding.Mesh | None = None,
    progress: bool = True,
) -> tuple[ModelConfig, Params]:
    """Reads the weights of an HF directory into the params pytree, placing each tensor as
    it is read (see the module docstring for the memory bounds).

    Args:
      model_dir: directory with ``config.json`` and ``model.safetensors`` or a sharded
        ``model.safetensors.index.json`` with its files.
      cfg: the config, when already read.
      dtype: parameter dtype (weights are cast from whatever the checkpoint stores).
      mesh: place each parameter with its partition-rule sharding on this mesh
        (``coevo_jax.parallel.param_shardings``); None = the default device, uncommitted.
      progress: a tqdm bar over the checkpoint tensors (terminals only).

    Returns:
      ``(config, params)``: params in the layout of ``param_shapes(cfg)``, every leaf a
      ``jax.Array`` of ``dtype``.

    Raises:
      ModelLoadError: missing or unreadable files, a missing tensor, a shape mismatch; the
        message names the file and the tensor. Missing tensors are found before any is read.
    """
    model_dir = Path(model_dir)
    cfg = read_config(model_dir) if cfg is None else cfg
    ck = _Checkpoint(model_dir)
    prefix = "model." if "model.embed_tokens.weight" in ck.file_of else ""
    plan = _plan(cfg, prefix)
    ck.require(plan)
    shapes = param_shapes(cfg)
    shardings: dict[str, Any] = dict.fromkeys(_flat(shapes))
    if mesh is not None:
        empties = jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(s, dtype), shapes, is_leaf=lambda s: isinstance(s, tuple)
        )
        shardings = _flat(param_shardings(empties, mesh))
    placer = _Placer(_flat(shapes), shardings, dtype)
    bar = tqdm(
        total=len(plan),
        desc=f"loading {model_dir.name}",
        unit="tensor",
        disable=not progress or None,
    )
    for path, names in ck.files(set(plan)):
        with ck.open(path) as handle:
            for name in names:
                shape, pieces = plan[name]
                for piece in pieces:
                    host = ck.read_piece(handle, path, name, shape, piece, placer.dtype)
                    placer.add(piece, host)
                    del host  # before the next piece is read
                bar.update()
    bar.close()
    return cfg, placer.params()
