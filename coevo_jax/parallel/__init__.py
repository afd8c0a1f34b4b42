"""Meshes with axes (data, fsdp, tensor), parameter partition rules, multi-host start.

The sharded forward pass is ``coevo_jax.models.sharded_forward``: it needs the decoder, and
``parallel`` sits below ``models`` (docs/design.md §1).
"""

from coevo_jax.parallel.mesh import AXES, initialize_distributed, make_mesh
from coevo_jax.parallel.rules import (
    LORA_RULES,
    PARAM_RULES,
    batch_sharding,
    batch_spec,
    cache_sharding,
    fit_spec,
    param_shardings,
    param_specs,
    place,
    shard_lora,
    shard_params,
    spec_for,
)

__all__ = [
    "AXES",
    "LORA_RULES",
    "PARAM_RULES",
    "batch_sharding",
    "batch_spec",
    "cache_sharding",
    "fit_spec",
    "initialize_distributed",
    "make_mesh",
    "param_shardings",
    "param_specs",
    "place",
    "shard_lora",
    "shard_params",
    "spec_for",
]
