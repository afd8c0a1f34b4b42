"""FlyRoute's hyperparameters (the FlyRoute paper, docs/design.md §8) as one frozen, validated config."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class FlyRouteConfig:
    """Everything that shapes routing, gating, distillation and exploration.

    Defaults are the FlyRoute paper's (theta, alpha, beta, gamma, n_explore, top-20 retrieved
    queries truncated to 450 characters; docs/design.md §8) or, where that paper is silent,
    ours (marked below).

    Attributes:
      theta: quality-gate threshold; a response with score ``>= theta`` enters the store.
      alpha: decay of the profile uncertainty ``U(a) = exp(-alpha * |E_a|)``.
      beta: redundancy weight in ``V+ = V * (1 - beta * R)``.
      gamma: exploration threshold on ``V+``.
      n_explore: most agents added by exploration per query.
      explore_floor: in the fallback (no agent reaches ``gamma``) only agents with
        ``V+ > explore_floor`` are taken. Ours: the FlyRoute paper's "top by V+" would otherwise
        dispatch to agents whose relevance is exactly 0, contradicting its own "relevance as
        a gate"; 0.0 keeps every agent with any lexical match.
      max_exploit: most agents the LLM router may pick (ours: 1, the benchmark has one gold
        expert per query and the first pick is the prediction).
      min_seed_queries: registration needs at least this many seed queries (the FlyRoute
        paper: 5).
      router_top_k: retrieved success queries per agent in the router prompt (the FlyRoute
        paper: 20).
      router_truncate_chars: each retrieved query is cut to this many characters (the FlyRoute
        paper: 450).
      router_prompt_tokens: a cap on the router prompt's tokens (chat template included)
        below the budget the LLM derives from its context length; None: that budget alone.
        Retrieved queries that do not fit are left out, lowest-ranked first (see
        :func:`.exploit.fit_router_prompt`).
      distill_every: M, distil an agent's description after every M new gated successes
        (ours: 10; the FlyRoute paper does not give M).
      distill_recent: how many of the most recent successes the distillation prompt shows.
      distill_response_chars: each success's response is cut to this in that prompt.
      description_max_chars: a distilled description is cut to this length.
      judge_response_chars: the response shown to the judge is cut to this length.
      agent_max_tokens / router_max_tokens / judge_max_tokens / distill_max_tokens:
        generation budgets per role.
      agent_temperature: sampling temperature for expert answers; the router, judge and
        distiller decode greedily (temperature 0) so a replay is reproducible.
      seed: base sampling seed (each request gets ``seed + step``).
    """

    theta: float = 0.7
    alpha: float = 0.5
    beta: float = 0.5
    gamma: float = 0.06
    n_explore: int = 2
    explore_floor: float = 0.0
    max_exploit: int = 1
    min_seed_queries: int = 5
    router_top_k: int = 20
    router_truncate_chars: int = 450
    router_prompt_tokens: int | None = None
    distill_every: int = 10
    distill_recent: int = 10
    distill_response_chars: int = 300
    description_max_chars: int = 800
    judge_response_chars: int = 2000
    agent_max_tokens: int = 256
    router_max_tokens: int = 32
    judge_max_tokens: int = 32
    distill_max_tokens: int = 160
    agent_temperature: float = 0.7
    seed: int = 0

    def __post_init__(self) -> None:
        def check(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"FlyRouteConfig: {msg}")

        for name in ("theta", "beta"):
            v = getattr(self, name)
            check(0.0 <= v <= 1.0 and math.isfinite(v), f"{name} must be in [0, 1], got {v}")
        check(
            self.alpha >= 0.0 and math.isfinite(self.alpha), f"alpha must be >= 0, got {self.alpha}"
        )
        check(self.gamma >= 0.0, f"gamma must be >= 0, got {self.gamma}")
        check(self.explore_floor >= 0.0, f"explore_floor must be >= 0, got {self.explore_floor}")
        check(self.n_explore >= 0, f"n_explore must be >= 0, got {self.n_explore}")
        check(self.agent_temperature >= 0.0, "agent_temperature must be >= 0")
        check(
            self.router_prompt_tokens is None
            or (isinstance(self.router_prompt_tokens, int) and self.router_prompt_tokens >= 1),
            f"router_prompt_tokens must be None or an integer >= 1, got {self.router_prompt_tokens!r}",
        )
        for name in (
            "max_exploit",
            "min_seed_queries",
            "router_top_k",
            "router_truncate_chars",
            "distill_every",
            "distill_recent",
            "distill_response_chars",
            "description_max_chars",
            "judge_response_chars",
            "agent_max_tokens",
            "router_max_tokens",
            "judge_max_tokens",
            "distill_max_tokens",
        ):
            v = getattr(self, name)
            check(isinstance(v, int) and v >= 1, f"{name} must be an integer >= 1, got {v!r}")
