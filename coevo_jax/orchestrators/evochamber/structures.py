"""The four collaboration structures LeadLearn chooses among, each a multi-call protocol.

The team is ordered (anchor, complement, scout); the anchor leads. Each structure returns the
team's final completion plus each member's own *attempt* (the last full solution it wrote),
which the loop scores for disagreement, CoDream's Contrast, the individual-credit ablation and
the prune signal:

- ``voting``: every member solves; the plurality answer wins (ties -> the anchor side, see
  :func:`prompts.plurality`); no extractable answer at all -> the anchor's completion.
- ``debate``: every member solves, then ``cfg.debate_rounds`` rounds in which each sees the
  others' latest answers and writes an updated solution; plurality of the last round.
- ``generator-critic``: the anchor generates; complement and scout each critique it and state
  their own answer; the anchor revises given both critiques. Final = the revision.
- ``decompose``: the anchor splits the problem into numbered subproblems (at most
  ``cfg.decompose_max_parts``); they are dealt round-robin to complement, scout, anchor, ...
  and solved; the anchor combines the sub-solutions into the final answer. Helpers write no
  full solution, so their attempt is None (the loop scores it as the team reward). A split
  with fewer than two parsable parts falls back to one part, the whole problem
  (counter ``decompose_split_fallback``).

Calls of one phase go to the LLM as one batch. Sampling seeds are ``seed_base + call index``
so a structure is reproducible given the LLM.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.prompts import (
    answer_key,
    clip,
    format_line,
    member_prompt,
    plurality,
    task_prompt,
)
from coevo_jax.text_llm import TextLLM, TextRequest

_ITEM = re.compile(r"^\s*(?:\d+\s*[.):]|[-*•]|step\s*\d+\s*[:.)])\s*(.+?)\s*$", re.I | re.M)


@dataclasses.dataclass(frozen=True)
class MemberContext:
    """What an agent brings to every prompt: its persona and retrieved experience."""

    persona: str
    lessons: tuple[str, ...] = ()
    metas: tuple[str, ...] = ()


@dataclasses.dataclass
class Caller:
    """Batches requests to the LLM, assigns seeds, counts calls, keeps a transcript."""

    llm: TextLLM
    contexts: Mapping[str, MemberContext]
    cfg: EvoChamberConfig
    seed_base: int = 0
    calls: int = 0
    transcript: list = dataclasses.field(default_factory=list)

    def ask(
        self,
        items: Sequence[tuple[str, str, str]],
        *,
        short: bool = False,
        with_context: bool = True,
    ) -> list[str]:
        """``items`` = (agent, body, tag) triples -> completions, in order, in one batch."""
        if not items:
            return []
        reqs = []
        for agent, body, tag in items:
            c = self.contexts[agent]
            prompt = (
                member_prompt(c.persona, c.lessons, c.metas, body)
                if with_context
                else member_prompt(c.persona, (), (), body)
            )
            reqs.append(
                TextRequest(
                    prompt=prompt,
                    agent=agent,
                    max_tokens=self.cfg.short_max_tokens if short else self.cfg.max_tokens,
                    temperature=self.cfg.temperature,
                    seed=self.seed_base + self.calls + len(reqs),
                    tag=tag,
                )
            )
        outs = list(self.llm.complete(reqs))
        if len(outs) != len(reqs):
            raise RuntimeError(f"TextLLM returned {len(outs)} completions for {len(reqs)} requests")
        outs = [o if isinstance(o, str) else "" for o in outs]
        self.calls += len(reqs)
        # An LLM that counts tokens (EngineTextLLM) has checked every prompt against its
        # budget; the transcript keeps both numbers so a run shows how close prompts came.
        count = getattr(self.llm, "count_tokens", None)
        budget = getattr(self.llm, "prompt_budget", None)
        for (agent, _, tag), o, r in zip(items, outs, reqs, strict=True):
            entry = {"agent": agent, "tag": tag, "output": o}
            if count is not None and budget is not None:
                entry["prompt_tokens"] = count(r.prompt)
                entry["prompt_budget"] = budget(r.max_tokens)
            self.transcript.append(entry)
        return outs


@dataclasses.dataclass(frozen=True)
class StructureResult:
    final: str
    attempts: dict[str, str | None]
    counters: dict[str, int]


def _vote(record: Mapping[str, Any], team: Sequence[str], answers: Sequence[str]) -> str:
    win = plurality([answer_key(record, a) for a in answers])
    return answers[0 if win is None else win]


def run_voting(caller: Caller, team: Sequence[str], record: Mapping[str, Any]) -> StructureResult:
    body = task_prompt(record)
    answers = caller.ask([(m, body, "solve") for m in team])
    return StructureResult(_vote(record, team, answers), dict(zip(team, answers, strict=False)), {})


def run_debate(caller: Caller, team: Sequence[str], record: Mapping[str, Any]) -> StructureResult:
    body = task_prompt(record)
    answers = caller.ask([(m, body, "solve") for m in team])
    for r in range(caller.cfg.debate_rounds):
        items = []
        for i, m in enumerate(team):
            others = "\n\n".join(
                f"Teammate {j + 1}:\n{clip(a)}" for j, a in enumerate(answers) if j != i
            )
            items.append(
                (
                    m,
                    f"{record['problem']}\n\nYour previous solution:\n{clip(answers[i])}\n\n"
                    f"Your teammates' solutions:\n{others}\n\nWeigh their reasoning against yours "
                    f"and write your updated full solution. {format_line(record)}",
                    f"debate_round{r + 1}",
                )
            )
        answers = caller.ask(items)
    return StructureResult(_vote(record, team, answers), dict(zip(team, answers, strict=False)), {})


def run_generator_critic(
    caller: Caller, team: Sequence[str], record: Mapping[str, Any]
) -> StructureResult:
    gen, critics = team[0], list(team[1:])
    draft = caller.ask([(gen, task_prompt(record), "generate")])[0]
    critiques = caller.ask(
        [
            (
                c,
                f"{record['problem']}\n\nA teammate proposed this solution:\n{clip(draft, 1200)}\n\n"
                "Critique it: point out any error or gap, briefly. Then give the solution you "
                f"believe is correct. {format_line(record)}",
                "critique",
            )
            for c in critics
        ]
    )
    notes = "\n\n".join(f"Critique {i + 1}:\n{clip(c)}" for i, c in enumerate(critiques))
    revision = caller.ask(
        [
            (
                gen,
                f"{record['problem']}\n\nYour draft:\n{clip(draft, 1200)}\n\n{notes}\n\nRevise your "
                f"solution, fixing what the critiques got right. {format_line(record)}",
                "revise",
            )
        ]
    )[0]
    attempts = {gen: revision, **dict(zip(critics, critiques, strict=False))}
    return StructureResult(revision, attempts, {})


def parse_parts(text: str, max_parts: int) -> list[str]:
    """Numbered/bulleted lines of ``text`` (at most ``max_parts``, empty ones dropped)."""
    return [p for p in _ITEM.findall(text) if p.strip()][:max_parts]


def run_decompose(
    caller: Caller, team: Sequence[str], record: Mapping[str, Any]
) -> StructureResult:
    lead = team[0]
    counters: dict[str, int] = {}
    split = caller.ask(
        [
            (
                lead,
                f"{record['problem']}\n\nBreak this problem into at most {caller.cfg.decompose_max_parts} "
                "smaller subproblems whose answers together solve it. List them one per line as "
                "'1. ...', '2. ...'. Do not solve them.",
                "split",
            )
        ],
        short=True,
    )[0]
    parts = parse_parts(split, caller.cfg.decompose_max_parts)
    if len(parts) < 2:
        counters["decompose_split_fallback"] = 1
        parts = [str(record["problem"]).strip()]
    order = list(team[1:]) + [lead]
    items = [
        (
            order[i % len(order)],
            f"Overall problem:\n{record['problem']}\n\nSolve only this subproblem, concisely:\n{p}",
            "subsolve",
        )
        for i, p in enumerate(parts)
    ]
    subs = caller.ask(items)
    listing = "\n\n".join(
        f"Subproblem {i + 1}: {p}\nSolution: {clip(s)}"
        for i, (p, s) in enumerate(zip(parts, subs, strict=False))
    )
    final = caller.ask(
        [
            (
                lead,
                f"{record['problem']}\n\nYour team solved these subproblems:\n{listing}\n\nCombine them "
                f"into the complete solution of the original problem. {format_line(record)}",
                "combine",
            )
        ]
    )[0]
    attempts: dict[str, str | None] = {m: None for m in team}
    attempts[lead] = final
    return StructureResult(final, attempts, counters)


STRUCTURE_FNS = {
    "voting": run_voting,
    "debate": run_debate,
    "generator-critic": run_generator_critic,
    "decompose": run_decompose,
}


def run_structure(
    name: str, caller: Caller, team: Sequence[str], record: Mapping[str, Any]
) -> StructureResult:
    if name not in STRUCTURE_FNS:
        raise ValueError(f"unknown structure {name!r}; known: {sorted(STRUCTURE_FNS)}")
    return STRUCTURE_FNS[name](caller, list(team), record)
