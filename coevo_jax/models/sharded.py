"""The decoder forward pass on a mesh.

It lives in ``models`` (not ``parallel``) because it needs the decoder, while ``parallel``
holds only the mesh and the partition rules, which the model loaders use (docs/design.md §1).
GSPMD does the partitioning: parameters carry the shardings of ``rules.PARAM_RULES``, the
batch is split over ``data`` x ``fsdp``, and ``jit`` propagates those through the same
``coevo_jax.models.forward`` the single-device path runs, so both compute the same function.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh

from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import DecoderOutput, KVCache, jit_forward
from coevo_jax.parallel.rules import batch_sharding, cache_sharding, shard_lora, shard_params


def sharded_forward(
    params: Any,
    cfg: ModelConfig,
    input_ids: Any,
    attention_mask: Any = None,
    *,
    mesh: Mesh,
    lora: Any = None,
    cache: KVCache | None = None,
    **kwargs: Any,
) -> DecoderOutput:
    """``coevo_jax.models.forward`` with params, batch, LoRA and cache placed on ``mesh``.

    Args:
      params: a params pytree; leaves already carrying a sharding on ``mesh`` stay put, others
        are placed per the partition rules.
      cfg, input_ids, attention_mask, kwargs: as for ``forward`` (``hidden_layers`` a tuple).
      mesh: a mesh from ``make_mesh``.
      lora: ``(LoRAWeights, agent_ids)``; the weights are replicated, the ids batch-split.
      cache: a KVCache, split over batch and KV heads.

    Returns:
      ``DecoderOutput`` whose arrays are sharded over ``mesh`` (batch-split).
    """
    params = shard_params(params, mesh)
    ids = jax.device_put(input_ids, batch_sharding(tuple(input_ids.shape), mesh))
    if attention_mask is not None:
        attention_mask = jax.device_put(
            attention_mask, batch_sharding(tuple(attention_mask.shape), mesh)
        )
    if lora is not None:
        weights, agent_ids = lora
        weights = weights.replace(params=shard_lora(weights.params, mesh))
        lora = (weights, jax.device_put(agent_ids, batch_sharding(tuple(agent_ids.shape), mesh)))
    if cache is not None:
        cache = jax.tree.map(
            lambda a: jax.device_put(a, cache_sharding(tuple(a.shape), mesh)), cache
        )
    with jax.set_mesh(mesh):  # lets forward pin activations' batch axis to the mesh
        return jit_forward(params, cfg, ids, attention_mask, lora=lora, cache=cache, **kwargs)
