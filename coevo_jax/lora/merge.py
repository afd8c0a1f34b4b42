"""Folding one agent's adapter into the base weights (for users who want a plain model).

``merge`` returns the merged params pytree. Writing it as an HF model directory that
transformers and vLLM serve with no LoRA support is ``coevo_jax.models.export_merged``, which
lives with the HF writer because ``lora`` sits below ``models`` (docs/design.md §1).
"""

from __future__ import annotations

from collections.abc import Mapping
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
