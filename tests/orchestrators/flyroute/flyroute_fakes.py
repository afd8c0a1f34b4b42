"""Scripted TextLLM stand-ins for FlyRoute tests (no model).

Each agent's answer is tagged with the agent's name; the scripted judge grades an answer
high when the answering agent is the expert for the query's topic keyword, which is the
pipeline-independent "truth" a real judge would approximate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from coevo_jax.orchestrators.flyroute.distill import DISTILL_TAG
from coevo_jax.orchestrators.flyroute.exploit import ROUTER_TAG
from coevo_jax.orchestrators.flyroute.gate import JUDGE_TAG
from coevo_jax.orchestrators.flyroute.pipeline import AGENT_TAG
from coevo_jax.text_llm import TextRequest

# topic keyword -> the agent that answers it well
TOPICS = {
    "integral": "math",
    "equation": "math",
    "python": "code",
    "function": "code",
    "paragraphs": "instructions",
    "bullet": "instructions",
    "riddle": "reasoning",
    "syllogism": "reasoning",
    "chemistry": "chem",
    "molecule": "chem",
}

TOPIC_WORDS = {
    "math": ["integral", "equation"],
    "code": ["python", "function"],
    "instructions": ["paragraphs", "bullet"],
    "reasoning": ["riddle", "syllogism"],
    "chem": ["chemistry", "molecule"],
}


def expert_for(text: str) -> str | None:
    for w in re.findall(r"[a-z]+", text.lower()):
        if w in TOPICS:
            return TOPICS[w]
    return None


def query_of(prompt: str) -> str:
    m = re.search(r"Query:\s*\n?(.*?)\n\n", prompt, re.S)
    return m.group(1).strip() if m else prompt


class ScriptedLLM:
    """Answers by request tag; every request is logged in ``calls``.

    Args:
      router: "keyword" (routes to the topic expert among the agents in the prompt),
        a fixed agent name, or a callable(prompt) -> reply.
      judge: callable(query, response) -> reply text; default: "Score: 0.9" when the
        responding agent is the topic expert, "Score: 0.2" otherwise.
      distill: callable(prompt) -> reply.
    """

    def __init__(
        self,
        *,
        router: str | Callable[[str], str] = "keyword",
        judge: Callable[[str, str], str] | None = None,
        distill: Callable[[str], str] | None = None,
    ):
        self.router = router
        self.judge = judge
        self.distill = distill
        self.calls: list[TextRequest] = []

    def complete(self, requests: Sequence[TextRequest]) -> list[str]:
        self.calls.extend(requests)
        return [self._one(r) for r in requests]

    def by_tag(self, tag: str) -> list[TextRequest]:
        return [r for r in self.calls if r.tag == tag]

    def _one(self, r: TextRequest) -> str:
        if r.tag == AGENT_TAG:
            return f"[agent={r.agent}] my answer to: {r.prompt}"
        if r.tag == JUDGE_TAG:
            q = re.search(r"Query:\n(.*?)\n\nResponse:\n", r.prompt, re.S).group(1)
            resp = re.search(r"Response:\n(.*?)\n\nGive a score", r.prompt, re.S).group(1)
            if self.judge is not None:
                return self.judge(q, resp)
            agent = re.search(r"\[agent=([^\]]+)\]", resp).group(1)
            return "Score: 0.9" if expert_for(q) == agent else "Score: 0.2"
        if r.tag == ROUTER_TAG:
            if callable(self.router):
                return self.router(r.prompt)
            if self.router != "keyword":
                return self.router
            agents = re.findall(r"^Agent: (\S+)$", r.prompt, re.M)
            q = re.search(r"^Query: (.*)$", r.prompt, re.M).group(1)
            e = expert_for(q)
            return e if e in agents else agents[0]
        if r.tag == DISTILL_TAG:
            if self.distill is not None:
                return self.distill(r.prompt)
            n = len(re.findall(r"^\d+\. Query:", r.prompt, re.M))
            return f"Description: handles queries like the {n} shown."
        raise AssertionError(f"unexpected tag {r.tag!r}")


def make_llm(*, model: str | None = None, agents: list[str] | None = None) -> ScriptedLLM:
    """The CLI's ``--llm MODULE:FACTORY`` entry point."""
    return ScriptedLLM()


def topic_query(agent: str, i: int, extra: str = "") -> str:
    words = TOPIC_WORDS[agent]
    return f"question about {words[i % len(words)]} {extra}".strip()


def make_records(n_per_class: int = 12) -> list[dict]:
    """Unified-record dicts whose problems carry their class's topic keywords."""
    cls_to_agent = {"math": "math", "code": "code", "if": "instructions", "reasoning": "reasoning"}
    out = []
    for cls, agent in cls_to_agent.items():
        for i in range(n_per_class):
            out.append(
                {
                    "id": f"{cls}-{i}",
                    "source": "fixture",
                    "class": cls,
                    "problem": topic_query(agent, i, f"{cls}case{i}"),
                }
            )
    return out
