"""A deterministic stand-in LLM with a fixed skill per (agent, niche), for tests and demos.

It recognises the task in a prompt by its problem text, answers correctly with probability
``skill[agent][niche]`` (a hash of agent and task id decides, so an agent is consistent across
the calls of one task and across runs), and answers every control call (structure choice,
reflection, CoDream phases, notes) in the labelled format the parsers expect. Wrong answers
differ between agents, so wrong members do not out-vote a right one by accident.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coevo_jax.orchestrators.evochamber.prompts import last_boxed
from coevo_jax.text_llm import TextRequest


def make_records(niches: Sequence[str], per_niche: int, *, interleave: bool = True) -> list[dict]:
    """Synthetic math records: ``per_niche`` per niche, interleaved or in blocks."""
    blocks = [
        [
            {
                "id": f"{z}-{i}",
                "class": "math",
                "niche": z,
                "problem": f"[{z}-{i}] Compute the value of task {i} in {z}.",
                "true_answer": str(100 + i),
            }
            for i in range(per_niche)
        ]
        for z in niches
    ]
    if not interleave:
        return [r for b in blocks for r in b]
    return [b[i] for i in range(per_niche) for b in blocks]


def boxed_reward(record: Mapping[str, Any], completion: str) -> float:
    """1.0 when the last ``\\boxed{}`` equals ``record["true_answer"]`` exactly, else 0.0."""
    return float(last_boxed(completion or "") == str(record["true_answer"]))


class ScriptedLLM:
    """Implements ``TextLLM``.

    Args:
      records: the stream (to recognise tasks in prompts).
      skill: agent name -> niche -> probability of a correct answer; missing -> ``default``.
      structure: what the leader names, or a callable (agent, niche) -> reply text.
      default: skill of agents/niches not in ``skill``.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        skill: Mapping[str, Mapping[str, float]],
        *,
        structure: str | Callable[[str, str], str] = "voting",
        default: float = 0.0,
    ):
        self.records = list(records)
        self.skill = skill
        self.structure = structure
        self.default = default
        self.calls: list[TextRequest] = []

    def _task(self, prompt: str) -> Mapping[str, Any] | None:
        for r in self.records:
            if r["problem"] in prompt:
                return r
        return None

    def correct(self, agent: str, record: Mapping[str, Any]) -> bool:
        p = self.skill.get(str(agent), {}).get(record["niche"], self.default)
        u = zlib.crc32(f"{agent}|{record['id']}".encode()) / 2**32
        return u < p

    def _answer(self, agent: str, rec: Mapping[str, Any] | None) -> str:
        if rec is None:
            return "I cannot tell. \\boxed{?}"
        ans = rec["true_answer"] if self.correct(agent, rec) else f"{rec['true_answer']}{agent}x"
        return f"Working it out. The answer is \\boxed{{{ans}}}."

    def _one(self, req: TextRequest) -> str:
        rec = self._task(req.prompt)
        agent, tag = str(req.agent), req.tag
        m = re.search(r"(?:Task niche|Tagged niches): ([^.,\n]+)[.,]", req.prompt)
        niche = rec["niche"] if rec else (m.group(1) if m else "?")
        if tag == "leadlearn":
            s = self.structure
            return s(agent, niche) if callable(s) else f"STRUCTURE: {s}"
        if tag == "split":
            return "1. Understand the quantities.\n2. Compute the value."
        if tag == "reflect":
            return f"LESSON: {agent} learned about {niche}.\nINSIGHT: {agent} checks its work."
        if tag == "leadlearn_note":
            return "NOTE: the structure fit the task."
        if tag == "codream_reflect":
            return f"DIAGNOSIS: {agent} diagnosis."
        if tag == "codream_contrast":
            return f"DELTA: {agent} should verify the final step."
        if tag == "codream_imagine":
            return f"STRATEGY: strategy from {agent} on {niche}\nNICHES: {niche}"
        if tag == "codream_debate":
            return "KEEP: 1, 2, 3"
        if tag == "codream_crystallize":
            return f"INSIGHT: insight from {agent}\nLEVEL: subdomain\nNICHE: {niche}"
        return self._answer(agent, rec)

    def complete(self, requests: Sequence[TextRequest]) -> list[str]:
        self.calls.extend(requests)
        return [self._one(r) for r in requests]
