"""EvoChamber's one config dataclass (the EvoChamber paper, docs/design.md §7).

Every threshold the EvoChamber paper describes in words ("dominates", "nearly identical",
"lags over a sustained window", "no specialist") is an explicit number here; the defaults are
our reading and are documented field by field. Load from YAML with
``coevo_jax._config.load_yaml``.
"""

from __future__ import annotations

import dataclasses

from coevo_jax._config import check_at_least

STRUCTURES = ("voting", "debate", "generator-critic", "decompose")
CREDIT_MODES = ("team", "individual")
TEAM_SELECTORS = ("niche", "random")


@dataclasses.dataclass(frozen=True)
class EvoChamberConfig:
    """Hyperparameters of the EvoChamber loop.

    Pool and team:
      pool_size: initial number of identically initialised agents (the EvoChamber paper: N = 20;
        docs/design.md §7).
      team_size: fixed at 3 (anchor, complement, scout); kept as a field so errors are clear.
      min_pool / max_pool: the lifecycle never shrinks below / grows above these.
      persona: the initial persona shared by every agent ("identically initialized").

    Individual level:
      alpha: EWMA rate of niche competence q_i(z) (eq. 2).
      q_init: initial competence (the EvoChamber paper: 0.5); also sigma's initial value.
      credit: "team" updates every member's q with the shared team reward r_t (the
        EvoChamber paper's eq. 2); "individual" uses each member's own attempt's score
        instead (an ablation).
      archive_top_k: lessons and meta-insights each retrieved into a solve prompt.

    Team level (eqs. 3-5):
      team_selector: "niche" is the EvoChamber paper's anchor/complement/scout selector
        (docs/design.md §7); "random" draws a team of the same size uniformly (seeded per step;
        its first member leads), the EvoChamber paper's "w/o niche-conditioned selector"
        ablation.
      beta: EWMA rate of pair synergy sigma_ij(z) (eq. 6).
      lambda_q / lambda_sigma / lambda_omega: complement weights (eq. 4).
      lambda_u / lambda_d: scout weights (eq. 5).
      structures: the structures LeadLearn may choose.
      fallback_structure: used when the leader's choice does not parse and the bank has
        no evidence (counted as ``structure_fallback``).
      bank_top_k: LeadLearn bank entries shown to the leader.
      profile_weight: weight of the team-competence part of the LeadLearn query vector
        relative to the (unit-norm) niche part.
      debate_rounds: rounds after the initial answers.
      decompose_max_parts: most subproblems a decompose split keeps.
      leadlearn_note: ask the leader for the bank note (one extra call per task).

    CoDream:
      codream: enable the session.
      codream_theta: fires when the members' mean score is below this.
      codream_on_disagreement: also fires when members' extracted answers differ.
      success_threshold: a member's score at or above this counts as successful (Contrast).

    Lifecycle, every ``tau`` tasks:
      genesis_min_tasks: a niche "recurs" once it has this many tasks in the stream so far.
      genesis_q_max: ... and "has no specialist" when the best q on it is below this.
      fork_q_min / fork_anchor_share / fork_window: an agent "dominates" a niche when it
        anchored at least fork_anchor_share of the niche's last fork_window tasks (a full
        window) and its q there is at least fork_q_min. Anchor share, not a q margin, is the
        signal because under the shared team reward the anchor's usual complement tracks its
        q closely. Each (agent, niche) forks at most once.
      merge_omega / merge_q_diff / merge_min_exposure: two agents are "nearly identical" when
        omega_ij >= merge_omega and max_z |q_i(z) - q_j(z)| <= merge_q_diff, both having at
        least merge_min_exposure tasks (so never-used agents, whose profiles are trivially
        identical, are not merged) and at least merge_min_age tasks old (a fork child starts
        as its parent's twin; without this it would be merged straight back).
      prune_window / prune_margin: an agent is pruned when it has at least prune_window
        recent scores and their mean lags the pool mean of recent means by prune_margin.
      specialize_q_min: an agent whose best-niche q reaches this gets a persona nudged to that
        niche (once per niche).

    Generation:
      max_tokens / temperature / short_max_tokens: budgets for solving and for the short
        control calls (choice, reflection, CoDream phases).
      seed: seeds tie-breaking and per-call sampling seeds.
      embed_dim: dimension of the hashed bag-of-words fallback embedder.
    """

    pool_size: int = 20
    team_size: int = 3
    min_pool: int = 3
    max_pool: int = 30
    persona: str = "You are a careful problem solver."

    alpha: float = 0.3
    q_init: float = 0.5
    credit: str = "team"
    archive_top_k: int = 3

    team_selector: str = "niche"
    beta: float = 0.3
    lambda_q: float = 1.0
    lambda_sigma: float = 0.5
    lambda_omega: float = 0.5
    lambda_u: float = 1.0
    lambda_d: float = 0.5
    structures: tuple[str, ...] = STRUCTURES
    fallback_structure: str = "voting"
    bank_top_k: int = 4
    profile_weight: float = 1.0
    debate_rounds: int = 1
    decompose_max_parts: int = 3
    leadlearn_note: bool = True

    codream: bool = True
    codream_theta: float = 0.5
    codream_on_disagreement: bool = True
    success_threshold: float = 0.5

    tau: int = 10
    genesis_min_tasks: int = 10
    genesis_q_max: float = 0.55
    fork_q_min: float = 0.8
    fork_anchor_share: float = 0.7
    fork_window: int = 10
    merge_omega: float = 0.999
    merge_q_diff: float = 0.01
    merge_min_exposure: int = 10
    merge_min_age: int = 30
    prune_window: int = 8
    prune_margin: float = 0.3
    specialize_q_min: float = 0.75

    max_tokens: int = 512
    short_max_tokens: int = 160
    temperature: float = 0.7
    seed: int = 0
    embed_dim: int = 256

    def __post_init__(self):
        def unit(name: str) -> None:
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")

        for name in (
            "alpha",
            "beta",
            "q_init",
            "codream_theta",
            "success_threshold",
            "genesis_q_max",
            "fork_q_min",
            "fork_anchor_share",
            "merge_q_diff",
            "prune_margin",
            "specialize_q_min",
        ):
            unit(name)
        if not 0.0 < self.alpha <= 1.0 or not 0.0 < self.beta <= 1.0:
            raise ValueError(f"alpha and beta must be in (0, 1], got {self.alpha}, {self.beta}")
        if not -1.0 <= self.merge_omega <= 1.0:
            raise ValueError(f"merge_omega must be in [-1, 1], got {self.merge_omega}")
        if self.team_size != 3:
            raise ValueError(
                f"team_size must be 3 (anchor, complement, scout), got {self.team_size}"
            )
        if self.min_pool < self.team_size:
            raise ValueError(f"min_pool ({self.min_pool}) must be >= team_size ({self.team_size})")
        if not self.min_pool <= self.pool_size <= self.max_pool:
            raise ValueError(
                f"need min_pool <= pool_size <= max_pool, got {self.min_pool}, "
                f"{self.pool_size}, {self.max_pool}"
            )
        if self.team_selector not in TEAM_SELECTORS:
            raise ValueError(
                f"team_selector must be one of {TEAM_SELECTORS}, got {self.team_selector!r}"
            )
        if self.credit not in CREDIT_MODES:
            raise ValueError(f"credit must be one of {CREDIT_MODES}, got {self.credit!r}")
        unknown = [s for s in self.structures if s not in STRUCTURES]
        if unknown or not self.structures:
            raise ValueError(
                f"structures must be a non-empty subset of {STRUCTURES}, got {self.structures}"
            )
        if self.fallback_structure not in self.structures:
            raise ValueError(
                f"fallback_structure {self.fallback_structure!r} is not in structures {self.structures}"
            )
        check_at_least(
            self,
            1,
            (
                "tau",
                "archive_top_k",
                "bank_top_k",
                "decompose_max_parts",
                "max_tokens",
                "short_max_tokens",
                "prune_window",
                "embed_dim",
                "fork_window",
            ),
        )
        check_at_least(
            self,
            0,
            (
                "debate_rounds",
                "genesis_min_tasks",
                "merge_min_exposure",
                "merge_min_age",
                "temperature",
                "lambda_q",
                "lambda_sigma",
                "lambda_omega",
                "lambda_u",
                "lambda_d",
                "profile_weight",
            ),
        )
