"""Creating, stacking and slicing multi-agent adapters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from coevo_jax.lora.config import LoRAConfig
from coevo_jax.lora.weights import LoRAWeights


@struct.dataclass
class AgentLoRA:
    """One agent's adapter: ``params = {module: {"A": [L, in, r], "B": [L, r, out]}}``."""

    params: dict[str, dict[str, jax.Array]]
    scale: float = struct.field(pytree_node=False, default=2.0)
    dropout: float = struct.field(pytree_node=False, default=0.0)

    @property
    def rank(self) -> int:
        return int(next(iter(self.params.values()))["A"].shape[-1])


def module_shapes(
    base_params: Mapping[str, Any], modules: Sequence[str]
) -> dict[str, tuple[int, int, int]]:
    """``{module: (L, in, out)}`` read off the stacked base weights ``params["layers"][m]``."""
    layers = base_params["layers"]
    out = {}
    for m in modules:
        if m not in layers:
            raise KeyError(f"base model has no projection {m!r} to adapt (has {sorted(layers)})")
        shape = tuple(int(s) for s in np.shape(layers[m]))
        if len(shape) != 3:
            raise ValueError(f"base weight layers.{m} should be [L, in, out], got {shape}")
        out[m] = shape
    return out


def init_lora(
    key: jax.Array, cfg: LoRAConfig, base_params: Mapping[str, Any], *, dtype=jnp.float32
) -> LoRAWeights:
    """Fresh stacked adapters for ``cfg.n_agents`` agents.

    A is drawn as PEFT draws it (kaiming-uniform with a=sqrt(5) on torch's ``[r, in]`` weight,
    i.e. U(-1/sqrt(in), 1/sqrt(in))), independently per layer and agent; B is zero, so every
    agent starts as the base model.
    """
    shapes = module_shapes(base_params, cfg.target_modules)
    params = {}
    for i, m in enumerate(cfg.target_modules):
        n_layers, d_in, d_out = shapes[m]
        bound = 1.0 / np.sqrt(d_in)
        a = jax.random.uniform(
            jax.random.fold_in(key, i),
            (n_layers, cfg.n_agents, d_in, cfg.rank),
            dtype,
            -bound,
            bound,
        )
        params[m] = {"A": a, "B": jnp.zeros((n_layers, cfg.n_agents, cfg.rank, d_out), dtype)}
    return LoRAWeights(params=params, scale=cfg.scale, dropout=cfg.dropout)


def stack(adapters: Sequence[AgentLoRA]) -> LoRAWeights:
    """Stacks single-agent adapters on a new agent axis (position i = agent i).

    All adapters must share modules, shapes and scaling.
    """
    if not adapters:
        raise ValueError("stack() needs at least one adapter")
    first = adapters[0]
    for j, ad in enumerate(adapters[1:], 1):
        if set(ad.params) != set(first.params):
            raise ValueError(
                f"adapter {j} targets {sorted(ad.params)}, adapter 0 targets {sorted(first.params)}"
            )
        if ad.scale != first.scale:
            raise ValueError(f"adapter {j} has scale {ad.scale}, adapter 0 has {first.scale}")
    params = jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *[ad.params for ad in adapters])
    return LoRAWeights(params=params, scale=first.scale, dropout=first.dropout)


def unstack(weights: LoRAWeights, agent_id: int) -> AgentLoRA:
    """Agent ``agent_id``'s slice of stacked adapters."""
    n = weights.n_agents
    if not 0 <= agent_id < n:
        raise IndexError(f"agent_id {agent_id} out of range for {n} agents")
    params = jax.tree.map(lambda x: x[:, agent_id], weights.params)
    return AgentLoRA(params=params, scale=weights.scale, dropout=weights.dropout)


def set_agent(weights: LoRAWeights, agent_id: int, adapter: AgentLoRA) -> LoRAWeights:
    """Returns ``weights`` with agent ``agent_id``'s slot replaced by ``adapter``."""
    if set(adapter.params) != set(weights.params):
        raise ValueError(
            f"adapter targets {sorted(adapter.params)}, slots target {sorted(weights.params)}"
        )
    if adapter.scale != weights.scale:
        raise ValueError(f"adapter scale {adapter.scale} differs from the slots' {weights.scale}")
    params = jax.tree.map(
        lambda s, a: s.at[:, agent_id].set(a.astype(s.dtype)), weights.params, adapter.params
    )
    return weights.replace(params=params)
