"""Partition rules: which mesh axes split which parameter dimension.

Matrices are ``[in, out]``. Projections into the heads / MLP width (q, k, v, gate, up) split
``out`` over ``tensor`` and ``in`` over ``fsdp``; projections back to the residual stream
(o, down) the other way round, so a tensor-parallel block needs one all-reduce after o and one
after down. Embedding rows (vocab) go over ``fsdp`` x ``tensor`` with the hidden axis whole:
the lookup is then a local masked gather plus an all-reduce, which GSPMD partitions cleanly
(splitting H too makes it replicate the gathered activations). Norms are small and
replicated. The stacked layer axis is never split: the scan reads one layer at a time.

A dimension an axis does not divide is left unsplit for that axis (tiny test models, odd head
counts); the result is still correct, only less sharded. LoRA weights are replicated by
default: at r=16 they are a fraction of a percent of the model.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

BATCH = ("data", "fsdp")

# (regex on the "/"-joined path, logical spec). First match wins.
PARAM_RULES: tuple[tuple[str, P], ...] = (
    (r"^embed$", P(("fsdp", "tensor"), None)),
    (r"^lm_head$", P("fsdp", "tensor")),
    (r"^final_norm$", P()),
    (r"^layers/(q|k|v|gate|up)$", P(None, "fsdp", "tensor")),
    (r"^layers/(o|down)$", P(None, "tensor", "fsdp")),
    (r"^layers/\w*norm$", P()),
)

LORA_RULES: tuple[tuple[str, P], ...] = ((r".*", P()),)


def _path_str(path: tuple[Any, ...]) -> str:
    parts = []
    for k in path:
        parts.append(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))))
    return "/".join(parts)


def fit_spec(spec: P, shape: tuple[int, ...], mesh: Mesh) -> P:
    """``spec`` with every axis dropped that does not divide its dimension of ``shape``."""
    out = []
    for i, dim in enumerate(shape):
        entry = spec[i] if i < len(spec) else None
        names = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        kept, size = [], 1
        for name in names:
            if dim % (size * mesh.shape[name]) == 0:
                kept.append(name)
                size *= mesh.shape[name]
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    while out and out[-1] is None:
        out.pop()
    return P(*out)


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh, rules=PARAM_RULES) -> P:
    """The fitted spec of the parameter at ``path`` (e.g. ``"layers/q"``).

    Raises:
      KeyError: no rule matches (a new parameter must get a rule, not a silent default).
    """
    for pattern, spec in rules:
        if re.search(pattern, path):
            return fit_spec(spec, shape, mesh)
    raise KeyError(f"no partition rule for parameter {path!r}; add one to coevo_jax.parallel.rules")


def param_specs(params: Any, mesh: Mesh, rules=PARAM_RULES) -> Any:
    """PartitionSpecs for every leaf of a params pytree (leaves: arrays or shapes' owners)."""
    return jax.tree_util.tree_map_with_path(
        lambda p, a: spec_for(_path_str(p), tuple(np.shape(a)), mesh, rules), params
    )


def param_shardings(params: Any, mesh: Mesh, rules=PARAM_RULES) -> Any:
    """NamedShardings for every leaf of ``params``."""
    return jax.tree.map(lambda s: NamedSharding(mesh, s), param_specs(params, mesh, rules))


def place(host: Any, sharding: NamedSharding) -> jax.Array:
    """Builds a global array from a host array, copying to each device only its own shard.

    Works in multi-process runs too (each process supplies the shards of its devices).
    """
    host = np.asarray(host)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def shard_params(params: Any, mesh: Mesh, rules=PARAM_RULES) -> Any:
    """``params`` placed on ``mesh`` per the rules (arrays already placed are resharded)."""
    shardings = param_shardings(params, mesh, rules)
    return jax.tree.map(
        lambda a, s: jax.device_put(a, s) if isinstance(a, jax.Array) else place(a, s),
        params,
        shardings,
    )


def shard_lora(lora_params: Any, mesh: Mesh, rules=LORA_RULES) -> Any:
    """LoRA ``{module: {"A", "B"}}`` placed on ``mesh`` (replicated unless ``rules`` say else)."""
    return shard_params(lora_params, mesh, rules)


def batch_spec(shape: tuple[int, ...], mesh: Mesh) -> P:
    """Leading (batch) axis over ``data`` x ``fsdp`` where it divides, the rest unsplit."""
    return fit_spec(P(BATCH), shape, mesh)


def batch_sharding(shape: tuple[int, ...], mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, batch_spec(shape, mesh))


def cache_sharding(shape: tuple[int, ...], mesh: Mesh) -> NamedSharding:
    """KV cache ``[L, B, S, nKV, D]``: batch like activations, KV heads over ``tensor``."""
    return NamedSharding(mesh, fit_spec(P(None, BATCH, None, "tensor"), shape, mesh))
