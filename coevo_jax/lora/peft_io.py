"""PEFT-format adapter directories: export one agent, import one agent.

A PEFT LoRA directory holds ``adapter_config.json`` and ``adapter_model.safetensors`` with keys
``base_model.model.model.layers.{l}.{self_attn|mlp}.{name}_proj.lora_{A|B}.weight`` and torch
shapes ``A: [r, in]``, ``B: [out, r]`` (ours are ``[in, r]`` / ``[r, out]``, transposed).
PEFT's ``PeftModel.from_pretrained`` and vLLM's ``PEFTHelper`` / ``LoRAModel`` read it.

Phi-3 / Phi-4-mini checkpoints fuse ``qkv_proj`` and ``gate_up_proj``, and both PEFT (on HF's
Phi3 modules) and vLLM (``packed_modules_mapping`` of its Phi3 model) adapt the fused modules.
We keep q, k, v (gate, up) as separate rank-r adapters, so the export writes each fused module
as one block-diagonal adapter of rank ``k*r``: ``A_fused`` stacks the k ``A`` matrices along
the rank axis and ``B_fused`` places each ``B`` on its own rows and rank columns. The product
``A_fused @ B_fused`` then equals the concatenation of the k separate deltas exactly. The
larger rank goes into PEFT's ``rank_pattern`` and ``alpha_pattern`` (alpha scaled so
``alpha/r`` is unchanged), which PEFT and vLLM both honour; a vLLM server for such adapters
needs ``--max-lora-rank`` at least ``3r`` (64 for r=16). A sidecar ``coevo_lora.json`` records
the block layout so our own import restores the rank-r form exactly; a fused adapter written
by anyone else is imported exactly too, as k adapters sharing ``A_fused`` (rank ``k*r``).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file, save_file

from coevo_jax._errors import UserError
from coevo_jax.lora.config import HF_MODULE_NAMES
from coevo_jax.lora.init import AgentLoRA, unstack
from coevo_jax.lora.weights import LoRAWeights

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
SIDECAR_NAME = "coevo_lora.json"
PREFIX = "base_model.model.model.layers"

# Fused Phi-3 modules: fused name -> (parent, parts in row order)
PHI3_FUSED = {"qkv_proj": ("self_attn", ("q", "k", "v")), "gate_up_proj": ("mlp", ("gate", "up"))}
_KEY_RE = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$"
)


class AdapterFormatError(UserError, ValueError):
    """An adapter directory is missing a file, or a tensor has the wrong name or shape."""


def _hf_name(module: str) -> str:
    return HF_MODULE_NAMES[module].split(".")[1]


def served_rank(rank: int, family: str, target_modules: Sequence[str]) -> int:
    """The largest adapter rank the export writes for one agent of rank ``rank``: a server's
    ``--max-lora-rank`` must hold it. Phi-3 fuses q/k/v (gate/up) into one module whose
    block-diagonal adapter has rank ``k * rank`` for k adapted parts; other families export
    each projection at ``rank``."""
    if family != "phi3":
        return rank
    k = max((len(parts) for _, parts in PHI3_FUSED.values()
             if any(p in target_modules for p in parts)), default=1)  # fmt: skip
    return k * rank


def _alpha_for(scale: float, rank: int, rslora: bool) -> float:
    return scale * (math.sqrt(rank) if rslora else rank)


def _atomic_write_dir(out_dir: Path, files: dict[str, Any]) -> None:
    """Writes files into ``out_dir`` via a temp dir + rename, so readers never see half a dir."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    for name, writer in files.items():
        writer(tmp / name)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old.{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        for p in old.iterdir():
            p.unlink()
        old.rmdir()
    else:
        os.replace(tmp, out_dir)


def export_peft(
    adapters: LoRAWeights | AgentLoRA,
    agent_id: int | None,
    out_dir: str | os.PathLike,
    *,
    base_model: str,
    family: str = "llama",
    rslora: bool = False,
) -> Path:
    """Writes agent ``agent_id``'s adapter as a PEFT LoRA directory (atomically).

    Args:
      adapters: stacked ``LoRAWeights`` (then ``agent_id`` picks the slot) or one ``AgentLoRA``
        (then ``agent_id`` must be None or 0).
      out_dir: target directory; replaced whole if it exists.
      base_model: ``base_model_name_or_path`` recorded in the config.
      family: "llama" / "qwen3" (one adapter per projection) or "phi3" (fused qkv/gate_up).
      rslora: whether ``adapters.scale`` is alpha/sqrt(r), to record ``use_rslora``.

    Returns:
      The directory path.
    """
    if isinstance(adapters, LoRAWeights):
        if agent_id is None:
            raise ValueError("export_peft: agent_id is required for stacked adapters")
        agent = unstack(adapters, agent_id)
    else:
        if agent_id not in (None, 0):
            raise ValueError("export_peft: a single AgentLoRA has only agent 0")
        agent = adapters
    params = {
        m: {k: np.asarray(v, dtype=np.float32) for k, v in ab.items()}
        for m, ab in agent.params.items()
    }
    rank = agent.rank
    alpha = _alpha_for(agent.scale, rank, rslora)
    tensors: dict[str, np.ndarray] = {}
    target_modules: list[str] = []
    rank_pattern: dict[str, int] = {}
    alpha_pattern: dict[str, float] = {}
    fused_layout: dict[str, list[str]] = {}
    n_layers = next(iter(params.values()))["A"].shape[0]

    def put(layer: int, parent: str, name: str, a: np.ndarray, b: np.ndarray) -> None:
        key = f"{PREFIX}.{layer}.{parent}.{name}"
        tensors[f"{key}.lora_A.weight"] = np.ascontiguousarray(a.T)
        tensors[f"{key}.lora_B.weight"] = np.ascontiguousarray(b.T)

    done: set[str] = set()
    if family == "phi3":
        for fused, (parent, parts) in PHI3_FUSED.items():
            present = [p for p in parts if p in params]
            if not present:
                continue
            if len(present) != len(parts):
                raise ValueError(
                    f"phi3 export: {fused} is one module in the checkpoint; adapt all of {parts} or none"
                )
            ranks = {params[p]["A"].shape[-1] for p in parts}
            if len(ranks) != 1:
                raise ValueError(f"phi3 export: {parts} must share one rank, got {sorted(ranks)}")
            k = len(parts)
            fused_rank = k * rank
            target_modules.append(fused)
            rank_pattern[fused] = fused_rank
            alpha_pattern[fused] = _alpha_for(agent.scale, fused_rank, rslora)
            fused_layout[fused] = list(parts)
            for layer in range(n_layers):
                a = np.concatenate([params[p]["A"][layer] for p in parts], axis=1)  # [in, k r]
                outs = [params[p]["B"][layer].shape[1] for p in parts]
                b = np.zeros((fused_rank, sum(outs)), np.float32)
                col = 0
                for j, p in enumerate(parts):
                    b[j * rank : (j + 1) * rank, col : col + outs[j]] = params[p]["B"][layer]
                    col += outs[j]
                put(layer, parent, fused, a, b)
            done.update(parts)
    elif family not in ("llama", "qwen3"):
        raise ValueError(f"export_peft: unknown family {family!r} (llama, qwen3, phi3)")
    for m, ab in params.items():
        if m in done:
            continue
        parent, name = HF_MODULE_NAMES[m].split(".")
        target_modules.append(name)
        for layer in range(n_layers):
            put(layer, parent, name, ab["A"][layer], ab["B"][layer])

    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": agent.dropout,
        "target_modules": sorted(target_modules),
        "rank_pattern": rank_pattern,
        "alpha_pattern": alpha_pattern,
        "use_rslora": rslora,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "modules_to_save": None,
        "use_dora": False,
    }
    sidecar = {"family": family, "rank": rank, "scale": agent.scale, "fused": fused_layout}
    if "qkv_proj" in fused_layout:
        sidecar["qkv_sizes"] = [int(params[p]["B"].shape[-1]) for p in ("q", "k", "v")]
    out = Path(out_dir)
    _atomic_write_dir(
        out,
        {
            WEIGHTS_NAME: lambda p: save_file(tensors, str(p), metadata={"format": "pt"}),
            CONFIG_NAME: lambda p: p.write_text(json.dumps(config, indent=2)),
            SIDECAR_NAME: lambda p: p.write_text(json.dumps(sidecar, indent=2)),
        },
    )
    return out


def _module_of(parent: str, name: str) -> str | None:
    for m, hf in HF_MODULE_NAMES.items():
        if hf == f"{parent}.{name}":
            return m
    return None


def import_peft(
    path: str | os.PathLike, *, dtype=jnp.float32, qkv_sizes: tuple[int, int, int] | None = None
) -> AgentLoRA:
    """Reads a PEFT LoRA directory into one agent's adapter (``AgentLoRA``).

    Per-module ``rank_pattern``/``alpha_pattern`` scalings differing from the global one are
    folded into that module's B, so the returned adapter carries one scale and computes the
    same deltas. Fused Phi-3 modules come back as separate q/k/v (gate/up) adapters (see the
    module docstring).

    Args:
      path: the adapter directory.
      dtype: dtype of the returned arrays.
      qkv_sizes: q, k, v output sizes, needed only for a fused Phi-3 ``qkv_proj`` adapter that
        was not written by :func:`export_peft` (ours record them in the sidecar).

    Raises:
      AdapterFormatError: naming the file and tensor for missing files, foreign keys, DoRA or
        bias adapters, or shapes that disagree.
    """
    path = Path(path)
    cfg_path, w_path = path / CONFIG_NAME, path / WEIGHTS_NAME
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise AdapterFormatError(f"{p}: missing (not a PEFT LoRA adapter directory)")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise AdapterFormatError(f"{cfg_path}: not valid JSON: {e}") from e
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterFormatError(f"{cfg_path}: peft_type {config.get('peft_type')!r} is not LORA")
    if config.get("use_dora") or config.get("bias", "none") != "none":
        raise AdapterFormatError(f"{cfg_path}: DoRA and LoRA biases are not supported")
    for key in ("r", "lora_alpha"):
        if key not in config:
            raise AdapterFormatError(f"{cfg_path}: missing field {key!r}")
    rslora = bool(config.get("use_rslora", False))
    r, alpha = int(config["r"]), float(config["lora_alpha"])

    def scale_of(module_name: str) -> float:
        rr = int(config.get("rank_pattern", {}).get(module_name, r))
        aa = float(config.get("alpha_pattern", {}).get(module_name, alpha))
        return aa / (math.sqrt(rr) if rslora else rr)

    base_scale = scale_of("")
    try:
        tensors = load_file(str(w_path))
    except Exception as e:  # safetensors raises several error types for corrupt files
        raise AdapterFormatError(f"{w_path}: cannot read safetensors: {e}") from e
    sidecar_path = path / SIDECAR_NAME
    sidecar = json.loads(sidecar_path.read_text()) if sidecar_path.is_file() else {}

    per: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for key, value in tensors.items():
        match = _KEY_RE.match(key)
        if not match:
            raise AdapterFormatError(f"{w_path}: unexpected tensor {key!r}")
        layer, parent, name, ab = int(match[1]), match[2], match[3], match[4]
        per.setdefault(f"{parent}.{name}", {}).setdefault(layer, {})[ab] = value

    out: dict[str, dict[str, list[np.ndarray]]] = {}
    for full, layers in per.items():
        parent, name = full.split(".")
        n_layers = max(layers) + 1
        missing = [i for i in range(n_layers) if set(layers.get(i, {})) != {"A", "B"}]
        if missing:
            raise AdapterFormatError(
                f"{w_path}: {full} lacks lora_A/lora_B at layers {missing[:5]}"
            )
        ratio = scale_of(name) / base_scale
        module = _module_of(parent, name)
        if module is not None:
            parts = [(module, None)]
        elif name in PHI3_FUSED:
            parts = [(p, j) for j, p in enumerate(PHI3_FUSED[name][1])]
        else:
            raise AdapterFormatError(f"{w_path}: no projection named {full}")
        block = sidecar.get("fused", {}).get(name)
        for layer in range(n_layers):
            a_t, b_t = layers[layer]["A"], layers[layer]["B"]  # [r', in], [out, r']
            if a_t.ndim != 2 or b_t.ndim != 2 or a_t.shape[0] != b_t.shape[1]:
                raise AdapterFormatError(
                    f"{w_path}: {full} layer {layer}: lora_A {a_t.shape} and lora_B {b_t.shape} disagree"
                )
            a = a_t.T.astype(np.float32)
            b = (b_t.T * ratio).astype(np.float32)
            if len(parts) == 1:
                out.setdefault(parts[0][0], {"A": [], "B": []})
                out[parts[0][0]]["A"].append(a)
                out[parts[0][0]]["B"].append(b)
                continue
            k = len(parts)
            sizes = _fused_sizes(name, b.shape[1], qkv_sizes or sidecar.get("qkv_sizes"), w_path)
            col = 0
            for (m, j), size in zip(parts, sizes, strict=True):
                if block:  # our own block-diagonal export: restore the rank-r pieces
                    rr = a.shape[1] // k
                    am, bm = a[:, j * rr : (j + 1) * rr], b[j * rr : (j + 1) * rr, col : col + size]
                else:  # shared A, exact for any fused adapter
                    am, bm = a, b[:, col : col + size]
                col += size
                out.setdefault(m, {"A": [], "B": []})
                out[m]["A"].append(am)
                out[m]["B"].append(bm)
    params = {
        m: {k: jnp.asarray(np.stack(v), dtype) for k, v in ab.items()} for m, ab in out.items()
    }
    return AgentLoRA(
        params=params, scale=base_scale, dropout=float(config.get("lora_dropout", 0.0))
    )


def _fused_sizes(name: str, total: int, qkv_sizes: Any, w_path: Path) -> list[int]:
    if name == "gate_up_proj":
        if total % 2:
            raise AdapterFormatError(f"{w_path}: gate_up_proj has odd output size {total}")
        return [total // 2, total // 2]
    if not qkv_sizes:
        raise AdapterFormatError(
            f"{w_path}: splitting qkv_proj needs the q/k/v output sizes: pass qkv_sizes="
            "(n_heads*head_dim, n_kv*head_dim, n_kv*head_dim)"
        )
    if sum(qkv_sizes) != total:
        raise AdapterFormatError(f"{w_path}: qkv_sizes {list(qkv_sizes)} do not add up to {total}")
    return list(qkv_sizes)
