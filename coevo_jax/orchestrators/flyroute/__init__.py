"""FlyRoute (docs/design.md §8): self-evolving agent profiles through a data flywheel.

Agents register with a name, an optional description and a few seed queries. Each query is
routed by an LLM router over the agents' profiles (exploit) plus BM25-gated exploration of
uncertain agents; the responses pass a quality gate into success stores, which are
periodically distilled into learned descriptions. ``replay`` streams a training split and
evaluates routing accuracy against gold routes the pipeline never sees.
"""

from coevo_jax.orchestrators.flyroute.bench_data import Benchmark, LabeledQuery, build_benchmark
from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.distill import Distiller
from coevo_jax.orchestrators.flyroute.exploit import (
    Router,
    RouterPromptError,
    fit_router_prompt,
    parse_agents,
)
from coevo_jax.orchestrators.flyroute.explore import (
    explore,
    explore_value,
    redundancy_adjusted,
    select_explore,
    uncertainty,
)
from coevo_jax.orchestrators.flyroute.gate import JudgeGate, VerifierGate, parse_score
from coevo_jax.orchestrators.flyroute.pipeline import FlyRoute, StepResult
from coevo_jax.orchestrators.flyroute.profiles import (
    Profile,
    ProfileStore,
    RegistrationError,
    Success,
)
from coevo_jax.orchestrators.flyroute.query import Query
from coevo_jax.orchestrators.flyroute.replay import evaluate, replay
from coevo_jax.orchestrators.flyroute.retrieval import ProfileRetriever

__all__ = [
    "Benchmark",
    "Distiller",
    "FlyRoute",
    "FlyRouteConfig",
    "JudgeGate",
    "LabeledQuery",
    "Profile",
    "ProfileRetriever",
    "ProfileStore",
    "Query",
    "RegistrationError",
    "Router",
    "RouterPromptError",
    "StepResult",
    "Success",
    "VerifierGate",
    "build_benchmark",
    "evaluate",
    "explore",
    "explore_value",
    "fit_router_prompt",
    "parse_agents",
    "parse_score",
    "redundancy_adjusted",
    "replay",
    "select_explore",
    "uncertainty",
]
