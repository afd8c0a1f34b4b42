"""Writes a params pytree as an HF model directory that transformers and vLLM load.

The inverse of :mod:`coevo_jax.models.hf_loader`: ``config.json`` (from the ``ModelConfig``),
weights in HF's names and torch ``[out, in]`` layout (Phi-3's q/k/v and gate/up re-fused into
``qkv_proj`` / ``gate_up_proj``; no ``lm_head`` when embeddings are tied), as one
``model.safetensors`` or, past ``max_shard_size``, shards ``model-0000i-of-0000n.safetensors``
with a ``model.safetensors.index.json``. Optionally the tokenizer (``tokenizer.json``,
``tokenizer_config.json`` with the chat template) and a ``generation_config.json``.
``export_merged`` writes one agent's adapter folded into the base weights the same way.

Hand-written rather than going through transformers' ``save_pretrained`` because this package
never imports torch; safetensors writes the files. Tensors are produced one at a time and a
shard is written as soon as it is full, so peak host memory is about one shard beyond the
params themselves. Everything goes into a temporary sibling directory that is renamed onto
``out_dir`` only when complete: a crash leaves no half-written model behind.

``config.json`` carries the rope settings in both spellings: ``rope_parameters``
(transformers >= 5) and the older top-level ``rope_theta`` / ``rope_scaling`` /
``partial_rotary_factor`` / ``original_max_position_embeddings``, so either generation of
transformers (and vLLM on either) reads the same rotary embedding.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy so safetensors can write it)
import numpy as np
from safetensors.numpy import save_file
from tqdm.auto import tqdm

from coevo_jax.lora.init import AgentLoRA
from coevo_jax.lora.merge import merge
from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import Params, param_shapes

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
GENERATION_CONFIG_FILE = "generation_config.json"
DEFAULT_MAX_SHARD_SIZE = "2GB"

_ARCHITECTURE = {
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
}
_TORCH_DTYPE = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(size: int | str) -> int:
    """Bytes of ``size``: an int, or ``"2GB"`` / ``"500MB"`` / ``"1GiB"`` (transformers' units)."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise ValueError(f"max_shard_size must be positive, got {size}")
        return size
    m = _SIZE_RE.match(str(size))
    if not m:
        raise ValueError(f"max_shard_size {size!r}: expected bytes or e.g. '2GB', '500MB', '1GiB'")
    n = int(float(m[1]) * _UNITS[(m[2] or "B").lower()])
    if n <= 0:
        raise ValueError(f"max_shard_size must be positive, got {size!r}")
    return n


def _rope_fields(cfg: ModelConfig) -> dict[str, Any]:
    """The rope-type specific fields shared by ``rope_scaling`` and ``rope_parameters``."""
    if cfg.rope_type == "llama3":
        return {
            "rope_type": "llama3",
            "factor": cfg.rope_factor,
            "low_freq_factor": cfg.rope_low_freq_factor,
            "high_freq_factor": cfg.rope_high_freq_factor,
            "original_max_position_embeddings": cfg.original_max_position_embeddings,
        }
    if cfg.rope_type == "longrope":
        out: dict[str, Any] = {
            "rope_type": "longrope",
            "type": "longrope",  # the key older Phi-3 configs (transformers < 4.45) look for
            "short_factor": list(cfg.rope_short_factor or ()),
            "long_factor": list(cfg.rope_long_factor or ()),
        }
        if cfg.rope_factor != 1.0:
            out["factor"] = cfg.rope_factor
        if cfg.rope_attention_factor is not None:
            out["attention_factor"] = cfg.rope_attention_factor
        return out
    return {"rope_type": "default"}


def hf_config_dict(
    cfg: ModelConfig,
    *,
    dtype: Any = None,
    bos_token_id: int | None = None,
    pad_token_id: int | None = None,
) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` for transformers' Llama / Qwen3 / Phi-3 classes.

    ``ModelConfig.from_hf_dict(hf_config_dict(cfg)) == cfg`` for every valid config.

    Args:
      cfg: the decoder config.
      dtype: weight dtype recorded as ``torch_dtype`` / ``dtype`` (None: not recorded).
      bos_token_id, pad_token_id: the special ids (the config has no field for them); null
        when None.

    Raises:
      ValueError: ``cfg`` cannot be expressed in that family's HF config (Phi-3 derives
        ``head_dim`` as ``hidden_size // num_attention_heads`` and cannot store another one;
        only Phi-3 has a ``sliding_window``).
    """
    if cfg.family == "phi3" and cfg.head_dim * cfg.num_heads != cfg.hidden_size:
        raise ValueError(
            f"phi3 config: head_dim {cfg.head_dim} != hidden_size/num_heads "
            f"({cfg.hidden_size}/{cfg.num_heads}); transformers' Phi3Config cannot express it"
        )
    if cfg.sliding_window is not None and cfg.family != "phi3":
        raise ValueError(
            f"{cfg.family} config: sliding_window={cfg.sliding_window} has no field in "
            f"transformers' {_ARCHITECTURE[cfg.family]} config (only Phi-3 carries one)"
        )
    rope = _rope_fields(cfg)
    params = {"rope_theta": cfg.rope_theta, **rope}
    if cfg.partial_rotary_factor != 1.0:
        params["partial_rotary_factor"] = cfg.partial_rotary_factor
    if cfg.original_max_position_embeddings is not None and cfg.rope_type != "default":
        params["original_max_position_embeddings"] = cfg.original_max_position_embeddings
    eos = list(cfg.eos_token_ids)
    d: dict[str, Any] = {
        "architectures": [_ARCHITECTURE[cfg.family]],
        "model_type": cfg.family,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None if cfg.rope_type == "default" else dict(rope),
        "rope_parameters": params,
    }
    if cfg.family == "llama":
        d.update(mlp_bias=False, pretraining_tp=1)
    elif cfg.family == "qwen3":
        d.update(use_sliding_window=False, sliding_window=None)
    else:  # phi3
        d.update(
            partial_rotary_factor=cfg.partial_rotary_factor,
            sliding_window=cfg.sliding_window,
            embd_pdrop=0.0,
            resid_pdrop=0.0,
        )
        if cfg.original_max_position_embeddings is not None:
            d["original_max_position_embeddings"] = cfg.original_max_position_embeddings
    # Written even when unknown (null): the config classes' defaults (Phi-3's pad id 32000)
    # would otherwise leak in, and can lie outside a small vocabulary.
    d["bos_token_id"] = None if bos_token_id is None else int(bos_token_id)
    d["eos_token_id"] = (eos[0] if len(eos) == 1 else eos) if eos else None
    d["pad_token_id"] = None if pad_token_id is None else int(pad_token_id)
    if dtype is not None:
        name = np.dtype(dtype).name
        if name not in _TORCH_DTYPE:
            raise ValueError(f"dtype {name} has no torch equivalent (float32, bfloat16, float16)")
        d["torch_dtype"] = d["dtype"] = _TORCH_DTYPE[name]
    return d


# ----------------------------------------------------------------------------- tensors


def _check_params(params: Params, cfg: ModelConfig) -> None:
    """Every parameter present with the shape ``cfg`` implies; errors name the parameter."""
    shapes = param_shapes(cfg)

    def check(expect: dict, got: Any, where: str) -> None:
        if not isinstance(got, dict) and not hasattr(got, "keys"):
            raise ValueError(f"save_hf: params{where} is not a dict")
        extra = sorted(set(got.keys()) - set(expect))
        missing = sorted(set(expect) - set(got.keys()))
        if missing or extra:
            raise ValueError(
                f"save_hf: params{where} does not match the config: missing {missing}, "
                f"unexpected {extra}"
            )
        for k, shape in expect.items():
            if isinstance(shape, dict):
                check(shape, got[k], f"{where}[{k!r}]")
            elif tuple(got[k].shape) != shape:
                raise ValueError(
                    f"save_hf: params{where}[{k!r}] has shape {tuple(got[k].shape)}, the "
                    f"config implies {shape}"
                )

    check(shapes, params, "")


class _Tensor(NamedTuple):
    name: str  # HF name
    shape: tuple[int, ...]  # torch layout
    dtype: np.dtype  # of the parameter it comes from (a fused tensor: of its first part)
    fetch: Callable[[], np.ndarray]  # host array in torch layout, not yet cast


def _tensor_plan(params: Params, cfg: ModelConfig) -> list[_Tensor]:
    """Every checkpoint tensor, in HF's usual order; nothing is read until ``fetch``."""
    layers = params["layers"]
    H = cfg.hidden_size
    plan: list[_Tensor] = []

    def host(x: Any) -> np.ndarray:
        return np.asarray(jax.device_get(x))

    def row(w: Any, i: int) -> np.ndarray:
        # A single-CPU-device array is viewed in place (no per-shape slice compile); elsewhere
        # one layer at a time crosses to the host, never the whole stacked parameter.
        if isinstance(w, np.ndarray):
            return w[i]
        devices = w.devices()
        if len(devices) == 1 and next(iter(devices)).platform == "cpu":
            return np.asarray(w)[i]
        return host(w[i])

    def add(name: str, shape: tuple[int, ...], source: Any, fetch: Callable[[], np.ndarray]):
        plan.append(_Tensor(name, tuple(shape), np.dtype(source.dtype), fetch))

    def mat(hf: str, ours: str, i: int) -> None:
        w = layers[ours]
        add(hf, (w.shape[2], w.shape[1]), w, lambda: row(w, i).T)

    def fused(hf: str, parts: tuple[str, ...], i: int) -> None:
        rows = sum(layers[p].shape[2] for p in parts)
        add(
            hf,
            (rows, H),
            layers[parts[0]],
            lambda: np.concatenate([row(layers[p], i).T for p in parts], axis=0),
        )

    def vec(hf: str, ours: str, i: int) -> None:
        w = layers[ours]
        add(hf, w.shape[1:], w, lambda: row(w, i))

    add(
        "model.embed_tokens.weight",
        params["embed"].shape,
        params["embed"],
        lambda: host(params["embed"]),
    )
    for i in range(cfg.num_layers):
        pre = f"model.layers.{i}."
        vec(pre + "input_layernorm.weight", "attn_norm", i)
        if cfg.family == "phi3":
            fused(pre + "self_attn.qkv_proj.weight", ("q", "k", "v"), i)
        else:
            for n in ("q", "k", "v"):
                mat(pre + f"self_attn.{n}_proj.weight", n, i)
        mat(pre + "self_attn.o_proj.weight", "o", i)
        if cfg.qk_norm:
            vec(pre + "self_attn.q_norm.weight", "q_norm", i)
            vec(pre + "self_attn.k_norm.weight", "k_norm", i)
        vec(pre + "post_attention_layernorm.weight", "mlp_norm", i)
        if cfg.family == "phi3":
            fused(pre + "mlp.gate_up_proj.weight", ("gate", "up"), i)
        else:
            for n in ("gate", "up"):
                mat(pre + f"mlp.{n}_proj.weight", n, i)
        mat(pre + "mlp.down_proj.weight", "down", i)
    add("model.norm.weight", (H,), params["final_norm"], lambda: host(params["final_norm"]))
    if not cfg.tie_word_embeddings:
        head = params["lm_head"]
        add("lm_head.weight", (head.shape[1], head.shape[0]), head, lambda: host(head).T)
    return plan


def _shards(sizes: list[int], limit: int) -> list[list[int]]:
    """Greedy split of tensor indices into shards of at most ``limit`` bytes (a tensor larger
    than ``limit`` gets a shard of its own, as in transformers)."""
    shards: list[list[int]] = [[]]
    used = 0
    for i, size in enumerate(sizes):
        if shards[-1] and used + size > limit:
            shards.append([])
            used = 0
        shards[-1].append(i)
        used += size
    return shards


# ----------------------------------------------------------------------------- directory


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out_dir}: directory exists and is not empty; pass overwrite=True to replace it "
            "(its current contents are deleted) or choose another path"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)


def _commit(tmp: Path, out_dir: Path) -> None:
    """Renames the finished ``tmp`` onto ``out_dir`` (replacing it whole if it exists)."""
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _tokenizer_files(tokenizer: Any, cfg: ModelConfig, tmp: Path) -> dict[str, Any]:
    """Writes ``tokenizer.json`` + ``tokenizer_config.json``; returns the special-token ids.

    ``tokenizer`` is our :class:`~coevo_jax.models.tokenizer.Tokenizer`: its ``backend`` is a
    ``tokenizers.Tokenizer``, which serialises itself to exactly the ``tokenizer.json`` that
    transformers' ``PreTrainedTokenizerFast`` reads (BOS insertion, when the model wants it,
    lives in that file's post-processor).
    """
    tokenizer.backend.save(str(tmp / "tokenizer.json"))
    added = {
        str(i): {
            "content": t.content,
            "lstrip": t.lstrip,
            "rstrip": t.rstrip,
            "normalized": t.normalized,
            "single_word": t.single_word,
            "special": t.special,
        }
        for i, t in sorted(tokenizer.backend.get_added_tokens_decoder().items())
    }
    tc: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": cfg.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": added,
        **tokenizer.special_tokens,
    }
    if tokenizer.chat_template is not None:
        tc["chat_template"] = tokenizer.chat_template
    _write_json(tmp / "tokenizer_config.json", tc)
    pad_text = tokenizer.special_tokens.get("pad_token")
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_ids": list(tokenizer.eos_token_ids),
        "pad_token_id": None if pad_text is None else tokenizer.pad_token_id,
    }


def save_hf(
    params: Params,
    cfg: ModelConfig,
    out_dir: str | os.PathLike,
    *,
    dtype: Any = None,
    tokenizer: Any = None,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Writes ``params`` as an HF model directory (atomically).

    ``transformers.AutoModelForCausalLM.from_pretrained(out_dir)`` and
    :func:`coevo_jax.models.load` read the result (tested); loading it back with ``load``
    gives ``params`` bit for bit when ``dtype`` is the params' own. The layout is the one HF
    checkpoints of these architectures have, which is what vLLM loads (not tested here).

    Args:
      params: decoder params in the layout of docs/interfaces.md (``[in, out]`` matrices,
        layers stacked on axis 0); jax (any sharding: shards are gathered one layer at a
        time) or numpy arrays.
      cfg: their config; ``config.json`` is :func:`hf_config_dict` of it.
      out_dir: target directory; must not exist or be empty unless ``overwrite``.
      dtype: dtype of the written tensors (e.g. ``jnp.bfloat16``); None keeps each
        parameter's own.
      tokenizer: optional :class:`~coevo_jax.models.tokenizer.Tokenizer`; writes
        ``tokenizer.json`` and ``tokenizer_config.json`` (special tokens, chat template) and
        takes BOS/EOS/pad ids from it for ``config.json`` / ``generation_config.json``.
      max_shard_size: bytes per safetensors file (int, or ``"2GB"``-style); one file
        ``model.safetensors`` when everything fits, else shards plus an index.
      overwrite: replace a non-empty ``out_dir`` (whole: files not written here are removed).
      progress: a tqdm bar over bytes written (terminals only).

    Returns:
      ``Path(out_dir)``.

    Raises:
      FileExistsError: ``out_dir`` is a file, or a non-empty directory without ``overwrite``.
      ValueError: params do not match ``cfg`` (names the parameter and both shapes), or
        ``cfg`` has no HF equivalent.
    """
    out_dir = Path(out_dir)
    limit = parse_size(max_shard_size)
    _check_params(params, cfg)
    hf_config_dict(cfg)  # refuse an inexpressible config before touching the disk
    _prepare_out_dir(out_dir, overwrite)
    plan = _tensor_plan(params, cfg)
    out_dtypes = [np.dtype(dtype) if dtype is not None else t.dtype for t in plan]
    sizes = [math.prod(t.shape) * dt.itemsize for t, dt in zip(plan, out_dtypes, strict=True)]
    shards = _shards(sizes, limit)
    n = len(shards)
    fnames = (
        [SINGLE_FILE] if n == 1 else [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    )

    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        ids: dict[str, Any] = {"bos_token_id": None, "pad_token_id": None, "eos_token_ids": []}
        if tokenizer is not None:
            ids = _tokenizer_files(tokenizer, cfg, tmp)
        config = hf_config_dict(
            cfg,
            dtype=out_dtypes[0],
            bos_token_id=ids["bos_token_id"],
            pad_token_id=ids["pad_token_id"],
        )
        eos = ids["eos_token_ids"] or list(cfg.eos_token_ids)
        if eos and tokenizer is not None:
            config["eos_token_id"] = eos[0] if len(eos) == 1 else eos
        _write_json(tmp / CONFIG_FILE, config)
        gen = {
            k: v
            for k, v in (
                ("bos_token_id", ids["bos_token_id"]),
                ("eos_token_id", (eos[0] if len(eos) == 1 else eos) if eos else None),
                ("pad_token_id", ids["pad_token_id"]),
            )
            if v is not None
        }
        if gen:
            _write_json(tmp / GENERATION_CONFIG_FILE, gen)

        weight_map: dict[str, str] = {}
        bar = tqdm(
            total=sum(sizes),
            desc=f"saving {out_dir.name}",
            unit="B",
            unit_scale=True,
            disable=not progress or None,
        )
        for fname, idx in zip(fnames, shards, strict=True):
            tensors = {}
            for i in idx:
                t = plan[i]
                tensors[t.name] = np.ascontiguousarray(t.fetch().astype(out_dtypes[i], copy=False))
                weight_map[t.name] = fname
            save_file(tensors, str(tmp / fname), metadata={"format": "pt"})
            bar.update(sum(sizes[i] for i in idx))
            del tensors
        bar.close()
        if n > 1:
            _write_json(
                tmp / INDEX_FILE,
                {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map},
            )
        _commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def export_merged(
    base_params: Mapping[str, Any],
    cfg: Any,
    adapters: LoRAWeights | AgentLoRA,
    agent_id: int | None,
    out_dir: str | os.PathLike,
    *,
    dtype: Any = None,
    tokenizer: Any = None,
    max_shard_size: int | str = "2GB",
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Writes base + agent ``agent_id``'s adapter, merged, as an HF model directory.

    ``transformers.AutoModelForCausalLM.from_pretrained(out_dir)`` then gives the logits of
    our forward with ``lora=(adapters, [agent_id])`` (fp32: < 1e-4; tested per family).

    Args:
      base_params: decoder params (not modified).
      cfg: their ``coevo_jax.models.ModelConfig``.
      adapters: stacked ``LoRAWeights`` (``agent_id`` picks the slot) or one ``AgentLoRA``.
      agent_id: the agent; None or 0 for a single ``AgentLoRA``.
      out_dir, dtype, tokenizer, max_shard_size, overwrite, progress: as for
        :func:`save_hf` (``dtype=None`` keeps the base dtype;
        merging itself runs in fp32).

    Returns:
      ``Path(out_dir)``.
    """
    merged = merge(base_params, adapters, agent_id)
    return save_hf(
        merged,
        cfg,
        out_dir,
        dtype=dtype,
        tokenizer=tokenizer,
        max_shard_size=max_shard_size,
        overwrite=overwrite,
        progress=progress,
    )
