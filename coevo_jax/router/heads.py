"""The router-head interface and the config switch that picks an implementation.

A router head is an NNX module with

- ``scores(h, cfg) -> (f [B, N], aux)``: non-negative per-agent scores the routing rule
  thresholds (familiarity, clipped predicted reward, or class probability);
- ``loss(h, rbar, active, cfg) -> (scalar, metrics)``: its training objective on one
  round's routed queries.

Only ``nnx.Param`` leaves are trainable; everything else (the familiarity targets) is frozen.
"""

from __future__ import annotations

from typing import Protocol

import jax
from flax import nnx

from coevo_jax.router.ablations import BestAgentClassifier, RewardRegressionHead
from coevo_jax.router.config import RouterConfig
from coevo_jax.router.familiarity import FamiliarityHeads


class RouterHead(Protocol):
    def scores(self, h: jax.Array, cfg: RouterConfig) -> tuple[jax.Array, dict]: ...

    def loss(
        self, h: jax.Array, rbar: jax.Array, active: jax.Array, cfg: RouterConfig
    ) -> tuple[jax.Array, dict]: ...


def make_head(cfg: RouterConfig, in_dim: int, *, rngs: nnx.Rngs) -> RouterHead:
    """Builds the head ``cfg.head`` names, for features of width ``in_dim``."""
    if cfg.head == "familiarity":
        return FamiliarityHeads(cfg.n_agents, in_dim, cfg.hidden, cfg.out_dim, rngs=rngs)
    if cfg.head == "regression":
        return RewardRegressionHead(cfg.n_agents, in_dim, cfg.hidden, rngs=rngs)
    if cfg.head == "classification":
        return BestAgentClassifier(cfg.n_agents, in_dim, cfg.hidden, rngs=rngs)
    raise ValueError(f"unknown router head {cfg.head!r}")
