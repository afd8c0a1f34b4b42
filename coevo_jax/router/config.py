"""Router configuration (docs/design.md §2 steps 2-4 and 8; the CERA-MoA paper's appendix B defaults).

One frozen dataclass, loadable from YAML through :func:`coevo_jax._config.from_dict`. Every
ablation the CERA-MoA paper reports is a field here, never a code fork:

- ``head``: ``"familiarity"`` (the paper's push-pull estimator), ``"regression"`` (an MLP
  predicts each agent's mean reward, MSE) or ``"classification"`` (softmax over agents, the
  best activated agent as target).
- ``feature_layers``: ``"mid"`` (hidden states after blocks ``floor(L/2)`` and
  ``floor(3L/4)``, concatenated) or ``"final"`` (the last hidden state only).
- ``routing``: ``"threshold"`` (cumulative familiarity reaches ``tau``) or ``"top_k"``.
- ``c_ucb = w_ent = 0``: no exploration. ``unbounded_push``: no margin.
- ``lam``, ``margin``, ``tau``: sensitivity runs (see ``allow_no_fallback``).
- ``feature_norm``: ``"none"`` (the paper, which names no normalisation) or
  ``"standardize"`` (per-dimension whitening with statistics frozen at the start of a run);
  ``feature_center`` is how much of the mean that whitening removes.
- ``update_steps`` and ``replay_rounds``: the router's training schedule. ``1`` and ``1`` is
  the paper (one step per round on that round's queries); larger values are for runs far
  shorter than the paper's, where one step per round is too little signal for the heads.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from coevo_jax._config import check_at_least

HEADS = ("familiarity", "regression", "classification")
FEATURE_LAYERS = ("mid", "final")
ROUTINGS = ("threshold", "top_k")
FEATURE_NORMS = ("none", "standardize")


@dataclasses.dataclass(frozen=True)
class RouterConfig:
    """Hyperparameters of the router.

    Attributes:
      n_agents: N, the number of agents routed over.
      head: which estimator maps features to per-agent scores (see module docstring).
      feature_layers: ``"mid"`` or ``"final"`` features from the router backbone.
      max_prompt_tokens: queries are left-truncated to this many tokens before the feature
        pass (the paper's 800-token input limit).
      hidden: width of every head's hidden layer (paper: 512).
      out_dim: output width of the familiarity predictor and target heads (paper: 256).
      lam: lambda in ``f = exp(-lam * d)`` (paper: 2.0).
      tau: cumulative-familiarity threshold (paper: 0.7).
      margin: m, the hinge margin for negative advantages (paper: 1.0).
      unbounded_push: ablation "no margin": a negative advantage pushes ``d`` up without the
        ``max(0, m - d)`` cut-off.
      lr: Adam learning rate of the trainable heads (paper: 1e-4).
      c_ucb: weight of the UCB bonus ``log(T) / (n_i + 1)`` in the training-time score.
      w_ent: weight of the historical mean generation entropy in the training-time score.
      routing: ``"threshold"`` (the paper) or ``"top_k"`` (fixed top-k ablations).
      top_k: k for ``routing="top_k"``.
      allow_no_fallback: accept configs with ``n_agents * exp(-lam * margin) > tau`` (the
        paper's lambda = 1.0 sensitivity run needs this); otherwise they are refused.
      feature_norm: ``"standardize"`` feeds every head ``(h - mean) / std``, with the
        per-dimension mean and standard deviation of ``h`` over ``norm_queries`` training
        queries taken before the first round and frozen (stored in the router state). Why:
        the familiarity heads are random-network distillation (a frozen random target, a
        trained predictor), which whitens its inputs for the same reason; raw mid-layer
        states of a chat prompt share one large direction (the template's last token), so
        without whitening a pull towards the target on one domain moves every domain.
        ``"none"``: raw ``h``, as the paper states it.
      feature_center: with ``feature_norm="standardize"``, the fraction of the features'
        mean that is subtracted before the rescaling (1: centred, the default; 0: rescaled
        only). Not in the paper. Why: a head reaches familiarity ``f`` on a query it has
        not seen only as far as the frozen target's output direction is shared by the
        query's domain, and centred inputs make that direction vary from query to query.
        On the conflict suite's features the mean cosine between a domain's target
        directions and their mean is 0.39 centred, 0.70 at 0.75 and 0.96 at 0 (a
        domain-constant prediction then reaches f 0.11, 0.22 and 0.58), so centred heads
        need about 3 agents to sum to ``tau = 0.7``; less centring keeps less of what tells
        the domains apart (``benchmarks/router_replay.py --feature-center``).
      norm_queries: how many training queries the statistics are taken over.
      update_steps: Adam steps the router takes at the end of every round (paper: 1).
      replay_rounds: each of those steps trains on the served queries of this many most
        recent rounds, the current one included (paper: 1, the current round only). Older
        rounds keep the rewards their agents earned then, so a window much longer than the
        agents take to change trains the heads on agents that no longer exist. A run may
        resume under another schedule (``Trainer.restore`` adapts the saved window).
      seed: PRNG seed for head initialisation.
    """

    n_agents: int = 4
    head: Literal["familiarity", "regression", "classification"] = "familiarity"
    feature_layers: Literal["mid", "final"] = "mid"
    max_prompt_tokens: int = 800
    hidden: int = 512
    out_dim: int = 256
    lam: float = 2.0
    tau: float = 0.7
    margin: float = 1.0
    unbounded_push: bool = False
    lr: float = 1e-4
    c_ucb: float = 2.0
    w_ent: float = 2.0
    routing: Literal["threshold", "top_k"] = "threshold"
    top_k: int = 1
    allow_no_fallback: bool = False
    feature_norm: Literal["none", "standardize"] = "none"
    feature_center: float = 1.0
    norm_queries: int = 256
    update_steps: int = 1
    replay_rounds: int = 1
    seed: int = 42

    def __post_init__(self):
        if self.n_agents < 1:
            raise ValueError(f"n_agents must be >= 1, got {self.n_agents}")
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")
        if self.feature_layers not in FEATURE_LAYERS:
            raise ValueError(
                f"feature_layers must be one of {FEATURE_LAYERS}, got {self.feature_layers!r}"
            )
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {self.routing!r}")
        if self.feature_norm not in FEATURE_NORMS:
            raise ValueError(
                f"feature_norm must be one of {FEATURE_NORMS}, got {self.feature_norm!r}"
            )
        if not 0.0 <= self.feature_center <= 1.0:
            raise ValueError(f"feature_center must be in [0, 1], got {self.feature_center}")
        if self.feature_center != 1.0 and self.feature_norm != "standardize":
            raise ValueError(
                f"feature_center={self.feature_center} needs feature_norm='standardize' (got "
                f"{self.feature_norm!r}): it sets how much of the mean that whitening removes"
            )
        check_at_least(self, 1, ("max_prompt_tokens", "hidden", "out_dim"))
        check_at_least(self, 2, ("norm_queries",))
        check_at_least(self, 1, ("update_steps", "replay_rounds"))
        if not 1 <= self.top_k <= self.n_agents:
            raise ValueError(f"top_k must be in [1, n_agents={self.n_agents}], got {self.top_k}")
        if not self.lam > 0:
            raise ValueError(f"lam must be > 0, got {self.lam}")
        if not self.tau > 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if not self.margin > 0:
            raise ValueError(f"margin must be > 0, got {self.margin}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.c_ucb < 0 or self.w_ent < 0:
            raise ValueError(f"c_ucb and w_ent must be >= 0, got {self.c_ucb}, {self.w_ent}")
        if self.head == "familiarity" and self.routing == "threshold":
            check_fallback_invariant(
                self.n_agents, self.lam, self.margin, self.tau, allow=self.allow_no_fallback
            )

    @property
    def explores(self) -> bool:
        return self.c_ucb > 0 or self.w_ent > 0

    def inference(self) -> RouterConfig:
        """The same router with exploration off (``c_ucb = w_ent = 0``), as at test time."""
        return dataclasses.replace(self, c_ucb=0.0, w_ent=0.0)


def check_fallback_invariant(
    n_agents: int, lam: float, margin: float, tau: float, *, allow: bool = False
) -> None:
    """Refuses ``n_agents * exp(-lam * margin) > tau``, unless ``allow``.

    Raises:
      ValueError: explaining the fallback guarantee the values would break.
    """
    floor_f = math.exp(-lam * margin)
    total = n_agents * floor_f
    if total <= tau or allow:
        return
    need_m = math.log(n_agents / tau) / lam
    raise ValueError(
        f"router fallback invariant broken: n_agents * exp(-lam * margin) = {n_agents} * "
        f"exp(-{lam} * {margin}) = {total:.4f} > tau = {tau}. The push-pull loss pushes an "
        f"agent with negative advantage away from its anchor only until d = margin, where its "
        f"familiarity settles at exp(-lam * margin) = {floor_f:.4f}. The fallback guarantee is "
        f"that a query no agent is good at (every agent at the margin) has total familiarity "
        f"<= tau and is therefore routed to ALL agents; with these values the cumulative "
        f"threshold is met by a prefix of agents that are all bad at the query, so hard "
        f"queries stop reaching the whole population. Use margin >= ln(N / tau) / lam = "
        f"{need_m:.4f}, a larger lam, fewer agents or a larger tau, or set "
        f"allow_no_fallback=True for a sensitivity ablation that knowingly drops the guarantee."
    )
