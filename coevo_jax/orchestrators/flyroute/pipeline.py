"""One FlyRoute step: route (exploit + explore), dispatch, gate, update, distil.

``FlyRoute.step`` takes a :class:`Query` and nothing else, so the gold route of a benchmark
item cannot reach routing, gating or profiling (the FlyRoute paper); the replay harness scores the
returned decisions against gold labels it keeps to itself.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import Counter
from collections.abc import Mapping

from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.distill import Distiller
from coevo_jax.orchestrators.flyroute.exploit import Router, RouteResult
from coevo_jax.orchestrators.flyroute.explore import ExploreResult, explore
from coevo_jax.orchestrators.flyroute.gate import Gate, GateItem, GateResult, JudgeGate
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.query import Query
from coevo_jax.orchestrators.flyroute.retrieval import ProfileRetriever
from coevo_jax.text_llm import TextLLM, TextRequest

AGENT_TAG = "flyroute.agent"


def agent_seed(base: int, step: int, agent: str) -> int:
    """The sampling seed of ``agent``'s answer at ``step``: distinct per agent, so experts that
    share a backbone and differ in nothing else still sample independently."""
    return (base * 1_000_003 + step * 10_007 + zlib.crc32(agent.encode())) % 2**31


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one step decided and did.

    Attributes:
      query_id: the query's id.
      step: 0-based step index.
      route: the router's result (``route.agents`` is ``S_exploit``).
      exploration: U, R, V, V+ per agent and ``S_explore``.
      dispatched: ``S_exploit ∪ S_explore``, exploit first.
      responses: agent -> response text.
      verdicts: agent -> gate result.
      stored: agents whose store received this query.
      distilled: agents whose learned description was updated at this step.
    """

    query_id: str
    step: int
    route: RouteResult
    exploration: ExploreResult | None
    dispatched: list[str]
    responses: dict[str, str]
    verdicts: dict[str, GateResult]
    stored: list[str]
    distilled: list[str]

    @property
    def prediction(self) -> str | None:
        """The router's first pick (what routing accuracy scores), None if it picked nobody."""
        return self.route.agents[0] if self.route.agents else None


class FlyRoute:
    """The FlyRoute data flywheel over a :class:`ProfileStore`.

    Args:
      store: the profiles (mutated in place; journaled if the store has a journal).
      config: hyperparameters.
      agent_llm: answers queries as the named agents (``TextRequest.agent`` = agent name).
      router: the exploit router.
      gate: the quality gate.
      distiller: distils learned descriptions; None disables distillation.
      explore: False disables exploration (exploit-only dispatch).
      agent_templates: optional agent name -> the agent's own prompt around the query, with
        a ``{query}`` placeholder (e.g. an answer-format line). It is part of the agent, fixed
        per agent, so it says nothing about which agent a query belongs to; the router, judge
        and stores see the raw query.
    """

    def __init__(
        self,
        store: ProfileStore,
        config: FlyRouteConfig,
        *,
        agent_llm: TextLLM,
        router: Router,
        gate: Gate,
        distiller: Distiller | None = None,
        explore: bool = True,
        agent_templates: Mapping[str, str] | None = None,
    ):
        for a, t in (agent_templates or {}).items():
            if "{query}" not in t:
                raise ValueError(f"agent template for {a!r} lacks the {{query}} placeholder: {t!r}")
        self.agent_templates = dict(agent_templates or {})
        self.store = store
        self.config = config
        self.agent_llm = agent_llm
        self.router = router
        self.gate = gate
        self.distiller = distiller
        self.explore_enabled = explore
        self.retriever = ProfileRetriever(store)
        self.steps = 0
        self.stats: Counter = Counter()

    @classmethod
    def from_llm(
        cls,
        store: ProfileStore,
        llm: TextLLM,
        config: FlyRouteConfig | None = None,
        *,
        gate: Gate | None = None,
        service_agent: str | int = -1,
        explore: bool = True,
        agent_templates: Mapping[str, str] | None = None,
    ) -> FlyRoute:
        """All roles on one LLM: agents by name, router/judge/distiller as ``service_agent``."""
        config = config or FlyRouteConfig()
        if gate is None:
            gate = JudgeGate(
                llm,
                theta=config.theta,
                judge_agent=service_agent,
                max_tokens=config.judge_max_tokens,
                response_chars=config.judge_response_chars,
                seed=config.seed,
            )
        return cls(
            store,
            config,
            agent_llm=llm,
            router=Router(llm, config, service_agent=service_agent),
            gate=gate,
            distiller=Distiller(llm, config, service_agent=service_agent),
            explore=explore,
            agent_templates=agent_templates,
        )

    def agent_prompt(self, agent: str, text: str) -> str:
        """The prompt ``agent`` receives for query ``text`` (its template, if it has one)."""
        t = self.agent_templates.get(agent)
        return text if t is None else t.replace("{query}", text)

    def route(self, queries: list[Query]) -> list[RouteResult]:
        """Exploit-only routing of a batch (evaluation): no dispatch, no profile change."""
        for q in queries:
            _check_query(q)
        return self.router.route(queries, self.store, self.retriever, step=self.steps)

    def step(self, query: Query) -> StepResult:
        """Routes, dispatches, gates and updates profiles for one query."""
        _check_query(query)
        cfg, step = self.config, self.steps
        scores = self.retriever.score(query.text)
        route = self.router.route([query], self.store, self.retriever, step=step, scores=[scores])[
            0
        ]
        exploration = None
        explore_set: list[str] = []
        if self.explore_enabled and cfg.n_explore > 0:
            exploration = explore(self.store, scores, route.agents, cfg)
            explore_set = exploration.selected
        dispatched = list(route.agents) + [a for a in explore_set if a not in route.agents]

        reqs = [
            TextRequest(
                prompt=self.agent_prompt(a, query.text),
                agent=a,
                max_tokens=cfg.agent_max_tokens,
                temperature=cfg.agent_temperature,
                seed=agent_seed(cfg.seed, step, a),
                tag=AGENT_TAG,
            )
            for a in dispatched
        ]
        outs = self.agent_llm.complete(reqs) if reqs else []
        if len(outs) != len(reqs):
            raise RuntimeError(
                f"agent LLM returned {len(outs)} completions for {len(reqs)} requests"
            )
        responses = dict(zip(dispatched, outs, strict=True))
        verdicts_list = self.gate([GateItem(query, a, responses[a]) for a in dispatched], step=step)
        verdicts = dict(zip(dispatched, verdicts_list, strict=True))

        stored = []
        explored = set(explore_set) - set(route.agents)
        for a in dispatched:
            v = verdicts[a]
            if v.passed:
                self.store.add_success(
                    a,
                    query.text,
                    responses[a],
                    v.score,
                    {
                        "gate": v.source,
                        "query_id": query.id,
                        "step": step,
                        "explore": a in explored,
                    },
                )
                stored.append(a)
        distilled: list[str] = []
        if self.distiller is not None and stored:
            distilled = list(self.distiller.run(self.store, stored, step=step))

        self.stats["steps"] += 1
        self.stats["dispatched"] += len(dispatched)
        self.stats["explored"] += len(explored)
        self.stats["stored"] += len(stored)
        self.stats["distilled"] += len(distilled)
        self.steps += 1
        return StepResult(
            query.id, step, route, exploration, dispatched, responses, verdicts, stored, distilled
        )


def _check_query(q: object) -> None:
    if not isinstance(q, Query):
        raise TypeError(
            f"FlyRoute takes Query(id, text) objects, got {type(q).__name__}; the gold route "
            "must stay with the evaluation harness"
        )
