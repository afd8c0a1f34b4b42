"""Folding one agent's adapter into the base weights (for users who want a plain model).

``merge`` returns the merged params pytree; ``export_merged`` writes it as an HF model
directory (``coevo_jax.models.hf_export.save_hf``) that transformers and vLLM serve with no
LoRA support at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from coevo_jax.lora.init import AgentLoRA, unstack
from coevo_jax.lora.weights import LoRAWeights


def merge(
    base_params: Mapping[str, Any], adapters: LoRAWeights | AgentLoRA, agent_id: int | None = None
) -> dict:
    """Returns base params with ``W += scale * A @ B`` for every adapted projection.

    Args:
      base_params: decoder params (layout of docs/interfaces.md); not modified.
      adapters: stacked adapters plus ``agent_id``, or one ``AgentLoRA``.

    Returns:
      A new params pytree whose forward without LoRA equals the base forward with the adapter
      (up to float rounding; computed in fp32, cast back to each weight's dtype).
    """
    if isinstance(adapters, LoRAWeights):
        if agent_id is None:
            raise ValueError("merge: agent_id is required for stacked adapters")
        n = next(iter(adapters.params.values()))["A"].shape[1]
        if not 0 <= agent_id < n:
            raise ValueError(f"merge: agent_id {agent_id} out of range for {n} stacked agents")
        agent = unstack(adapters, agent_id)
    elif agent_id not in (None, 0):
        raise ValueError("merge: a single AgentLoRA has only agent 0")
    else:
        agent = adapters
    layers = dict(base_params["layers"])
    for m, ab in agent.params.items():
        w = layers[m]
        delta = jnp.einsum("lir,lro->lio", ab["A"].astype(jnp.float32), ab["B"].astype(jnp.float32))
        layers[m] = (w.astype(jnp.float32) + agent.scale * delta).astype(w.dtype)
    out = dict(base_params)
    out["layers"] = layers
    return out


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
        :func:`coevo_jax.models.hf_export.save_hf` (``dtype=None`` keeps the base dtype;
        merging itself runs in fp32).

    Returns:
      ``Path(out_dir)``.
    """
    from coevo_jax.models.hf_export import save_hf

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
