"""The CERA-MoA router: mid-layer features, familiarity heads, push-pull loss, routing rules
and the ablation routers (docs/design.md §2 steps 2-4 and 8).

Pure functions (``familiarity``, ``push_pull_loss``, ``router_advantages``,
``routing_scores``, ``select_agents``, ``select_top_k``) plus small NNX modules and a jitted
state/step API (``init_router``, ``route``, ``update_counters``, ``router_step``,
``record_entropy``).
"""

from __future__ import annotations

from coevo_jax.router.ablations import (
    BestAgentClassifier,
    RewardRegressionHead,
    best_agent_targets,
    classification_loss,
    regression_loss,
)
from coevo_jax.router.config import RouterConfig, check_fallback_invariant
from coevo_jax.router.familiarity import (
    FamiliarityHeads,
    FrozenTarget,
    familiarity,
    orthogonal_across_agents,
)
from coevo_jax.router.features import (
    feature_layers,
    features,
    left_truncate,
    pad_queries,
    standardization,
    standardize,
)
from coevo_jax.router.heads import RouterHead, make_head
from coevo_jax.router.losses import push_pull_loss, router_advantages
from coevo_jax.router.replay import RouterReplay, push_round, rewindow
from coevo_jax.router.routing import activate, routing_scores, select_agents, select_top_k
from coevo_jax.router.state import (
    RouterCounters,
    RouterState,
    feature_dim,
    init_router,
    make_optimizer,
    with_feature_stats,
)
from coevo_jax.router.step import (
    RoutingDecision,
    record_entropy,
    route,
    router_loss,
    router_step,
    update_counters,
)

__all__ = [
    "BestAgentClassifier",
    "FamiliarityHeads",
    "FrozenTarget",
    "RewardRegressionHead",
    "RouterConfig",
    "RouterCounters",
    "RouterHead",
    "RouterReplay",
    "RouterState",
    "RoutingDecision",
    "best_agent_targets",
    "check_fallback_invariant",
    "classification_loss",
    "familiarity",
    "feature_dim",
    "feature_layers",
    "features",
    "init_router",
    "left_truncate",
    "make_head",
    "make_optimizer",
    "orthogonal_across_agents",
    "pad_queries",
    "push_pull_loss",
    "push_round",
    "record_entropy",
    "regression_loss",
    "rewindow",
    "route",
    "router_advantages",
    "router_loss",
    "router_step",
    "routing_scores",
    "activate",
    "select_agents",
    "select_top_k",
    "standardization",
    "standardize",
    "update_counters",
    "with_feature_stats",
]
