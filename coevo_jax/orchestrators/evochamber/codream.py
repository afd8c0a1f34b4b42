"""CoDream: post-hoc knowledge flow from strong to weak agents (the EvoChamber paper, population level).

A session fires when the members' mean score is below ``cfg.codream_theta`` or (if enabled)
when their outcomes disagree (see :func:`should_fire`). A member *succeeded* when its score
is at least ``cfg.success_threshold``. The EvoChamber paper's Contrast "pairs failing members
with successful ones", so a session needs a success: when no member succeeded it is skipped
before any call (recorded as ``skipped: "no_success"``). Otherwise five phases, each an LLM
call per participant, batched per phase:

1. Reflect: each member privately diagnoses its own attempt.              ``DIAGNOSIS:``
2. Contrast: every failing member contrasts its attempt with the best successful member's
   (highest score, ties -> team order) and states the delta.              ``DELTA:``
3. Imagine: each member turns its delta (a successful one: its diagnosis) into a hypothetical
   strategy tagged with the niches it may apply to.          ``STRATEGY:`` + ``NICHES:``
4. Debate: each member reads all proposals and says which to keep.        ``KEEP: 1, 3``
   A proposal survives with a strict majority of keep votes.
5. Crystallize: each surviving proposal's author turns it into a structured insight:
   ``INSIGHT:`` text, ``LEVEL:`` task-local | subdomain | cross-domain, ``NICHE:`` scope
   (a JSON object with keys insight/level/niche is accepted too).

Producers and consumers follow the EvoChamber paper ("strong agents produce knowledge while
weak ones consume it"; docs/design.md §7): an insight's *giver* is the successful member whose
approach it carries (for a failing member's delta, the successful member it was contrasted
with; for a successful member's own proposal, itself), so a failing member never gives. Each
insight is written to every active agent other than its giver whose competence on the
insight's niche is strictly below the pool median there (:func:`recipients`), taken after the
task's own competence update (the EvoChamber paper's order: update, then CoDream); with
everyone equal, nobody is below the median and nothing is written.

Fallbacks (never an error; each counted under the name in brackets): an unlabeled
diagnosis/delta uses the whole reply, clipped; an unlabeled strategy is the reply's first
non-empty line [codream_strategy_unlabeled] and an empty reply proposes nothing
[codream_strategy_missing]; a debate reply with neither ``KEEP:`` nor ``DROP:`` votes to keep everything
[codream_debate_fallback]; an insight without text is dropped
[codream_insight_malformed]; an unknown level becomes "subdomain" [codream_level_fallback];
a niche that matches no known niche (after lowercasing and dropping non-alphanumerics)
becomes the proposal's first known ``NICHES:`` tag, else the task's niche
[codream_niche_fallback].
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.prompts import clip
from coevo_jax.orchestrators.evochamber.state import INSIGHT_LEVELS, ChamberState
from coevo_jax.orchestrators.evochamber.structures import Caller

_LEVEL_ALIASES = {
    "task-local": ("task-local", "task local", "tasklocal", "task", "local"),
    "subdomain": ("subdomain", "sub-domain", "subdomain-scoped", "domain", "niche"),
    "cross-domain": (
        "cross-domain",
        "cross domain",
        "crossdomain",
        "cross",
        "global",
        "general",
        "meta",
    ),
}


def should_fire(
    scores: Sequence[float], keys: Sequence[str | None], cfg: EvoChamberConfig
) -> str | None:
    """ "low_reward", "disagreement" or None.

    ``keys`` are outcome keys (see ``loop.outcome_key``): per-test results for code, final
    answers otherwise, so two programs that differ only in text do not disagree."""
    if not cfg.codream:
        return None
    if float(np.mean(scores)) < cfg.codream_theta:
        return "low_reward"
    if cfg.codream_on_disagreement and len({k for k in keys if k is not None}) > 1:
        return "disagreement"
    return None


def recipients(
    state: ChamberState, niche: str, cfg: EvoChamberConfig, giver: str | None = None
) -> list[str]:
    """Active agents other than ``giver`` with q_i(niche) strictly below the pool median on
    ``niche`` (the median over the whole active pool)."""
    q = {a: ag.competence(niche, cfg.q_init) for a, ag in state.agents.items()}
    med = float(np.median(list(q.values())))
    return [a for a, v in q.items() if v < med and a != giver]


def _label(text: str, label: str) -> str | None:
    m = re.search(rf"{label}\s*:\s*(.+?)(?=\n\s*[A-Z][A-Z ]{{2,}}:|\Z)", text or "", re.I | re.S)
    if not m:
        return None
    body = " ".join(m.group(1).split())
    return body or None


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def match_niche(raw: str | None, known: Sequence[str]) -> str | None:
    if not raw:
        return None
    table = {_norm(z): z for z in known}
    return table.get(_norm(raw))


def parse_level(raw: str | None) -> str | None:
    if not raw:
        return None
    low = raw.strip().lower()
    for level in INSIGHT_LEVELS:
        if low.startswith(level):
            return level
    for level, al in _LEVEL_ALIASES.items():
        if any(re.search(rf"(?<![a-z]){re.escape(a)}(?![a-z])", low) for a in al):
            return level
    return None


def parse_insight(text: str, niche: str, known: Sequence[str]) -> tuple[dict | None, list[str]]:
    """(insight {text, level, niche} or None, fallback counter names); ``niche`` is the scope
    used when the reply names no known niche."""
    fallbacks: list[str] = []
    body = level = scope = None
    m = re.search(r"\{.*\}", text or "", re.S)
    if m:
        try:
            obj = json.loads(m.group(0))
            if isinstance(obj, dict):
                body = obj.get("insight") or obj.get("text")
                level, scope = obj.get("level"), obj.get("niche") or obj.get("scope")
                body = " ".join(str(body).split()) if body else None
                level = str(level) if level is not None else None
                scope = str(scope) if scope is not None else None
        except json.JSONDecodeError:
            pass
    if body is None:
        body = _label(text, "insight")
        level = _label(text, "level")
        scope = _label(text, "niche") or _label(text, "scope")
    if not body:
        return None, ["codream_insight_malformed"]
    lv = parse_level(level)
    if lv is None:
        lv = "subdomain"
        fallbacks.append("codream_level_fallback")
    z = match_niche(scope, known)
    if z is None:
        z = niche
        fallbacks.append("codream_niche_fallback")
    return {"text": body[:400], "level": lv, "niche": z}, fallbacks


def parse_keep(text: str, n: int) -> set[int] | None:
    """Indices (0-based) kept by one debate vote; None when the vote does not parse."""
    keep = re.search(r"keep\s*:\s*([^\n]*)", text or "", re.I)
    drop = re.search(r"drop\s*:\s*([^\n]*)", text or "", re.I)
    if keep:
        return {int(x) - 1 for x in re.findall(r"\d+", keep.group(1)) if 1 <= int(x) <= n}
    if drop:
        return set(range(n)) - {int(x) - 1 for x in re.findall(r"\d+", drop.group(1))}
    return None


def run_codream(
    caller: Caller,
    team: Sequence[str],
    record: Mapping[str, Any],
    niche: str,
    attempts: Mapping[str, str | None],
    scores: Sequence[float],
    known_niches: Sequence[str],
    *,
    success_threshold: float,
) -> tuple[list[dict], dict[str, int]]:
    """Runs the five phases. Returns (insights [{giver, author, text, level, niche}],
    counters); no call and no insight when no member scored ``>= success_threshold``
    (counter ``codream_skipped_no_success``)."""
    counters: dict[str, int] = {}

    def bump(name: str) -> None:
        counters[name] = counters.get(name, 0) + 1

    succeeded = [m for m, s in zip(team, scores, strict=True) if s >= success_threshold]
    if not succeeded:
        bump("codream_skipped_no_success")
        return [], counters

    problem = str(record["problem"]).strip()[:800]

    def shown(m: str) -> str:
        return clip(attempts.get(m) or "(no full attempt: you solved a part)", 600)

    # 1. Reflect
    outs = caller.ask(
        [
            (
                m,
                f"Task:\n{problem}\n\nYour attempt (end):\n{shown(m)}\nYour score: {s:.2f}.\n\n"
                "Privately diagnose what went right or wrong in your attempt. Reply: DIAGNOSIS: <text>",
                "codream_reflect",
            )
            for m, s in zip(team, scores, strict=False)
        ],
        short=True,
        with_context=False,
    )
    diag = {
        m: _label(o, "diagnosis") or " ".join(o.split())[:400]
        for m, o in zip(team, outs, strict=False)
    }

    # 2. Contrast: failing members against the best successful one.
    score_of = dict(zip(team, scores, strict=True))
    best = max(succeeded, key=lambda m: (score_of[m], -team.index(m)))
    others = [m for m in team if m not in succeeded]
    outs = caller.ask(
        [
            (
                m,
                f"Task:\n{problem}\n\nYour attempt (end):\n{shown(m)}\nYour diagnosis: {diag[m]}\n\n"
                f"A teammate's attempt succeeded (end):\n{shown(best)}\nTheir diagnosis: "
                f"{diag[best]}\n\nWhat did the better approach do differently? Reply: DELTA: <text>",
                "codream_contrast",
            )
            for m in others
        ],
        short=True,
        with_context=False,
    )
    delta = {
        m: _label(o, "delta") or " ".join(o.split())[:400]
        for m, o in zip(others, outs, strict=False)
    }
    for m in succeeded:
        delta[m] = diag[m]
    giver_of = {m: (m if m in succeeded else best) for m in team}

    # 3. Imagine
    outs = caller.ask(
        [
            (
                m,
                f"Task niche: {niche}. Known niches: {', '.join(known_niches)}.\nObservation: "
                f"{delta[m]}\n\nTurn this into a strategy to try on future tasks. Reply with two "
                "lines:\nSTRATEGY: <strategy>\nNICHES: <comma-separated niches it applies to>",
                "codream_imagine",
            )
            for m in team
        ],
        short=True,
        with_context=False,
    )
    proposals = []
    for m, o in zip(team, outs, strict=False):
        strat = _label(o, "strategy")
        if not strat:
            strat = next((" ".join(ln.split())[:400] for ln in o.splitlines() if ln.strip()), None)
            bump("codream_strategy_unlabeled" if strat else "codream_strategy_missing")
        if strat:
            tags = [
                t
                for t in (
                    match_niche(x, known_niches) for x in (_label(o, "niches") or "").split(",")
                )
                if t
            ]
            proposals.append((m, strat, tags))
    if not proposals:
        return [], counters

    # 4. Debate
    listing = "\n".join(f"{i + 1}. {s}" for i, (_, s, _) in enumerate(proposals))
    outs = caller.ask(
        [
            (
                m,
                f"Task niche: {niche}. Proposed strategies:\n{listing}\n\nCritique them and keep "
                "only the sound, useful ones. Reply: KEEP: <numbers>",
                "codream_debate",
            )
            for m in team
        ],
        short=True,
        with_context=False,
    )
    votes = np.zeros(len(proposals), int)
    for o in outs:
        kept = parse_keep(o, len(proposals))
        if kept is None:
            bump("codream_debate_fallback")
            kept = set(range(len(proposals)))
        for i in kept:
            votes[i] += 1
    survivors = [p for p, v in zip(proposals, votes, strict=False) if 2 * v > len(team)]

    # 5. Crystallize
    outs = caller.ask(
        [
            (
                m,
                f"Strategy: {s}\nTagged niches: {', '.join(tags) or niche}. Known niches: "
                f"{', '.join(known_niches)}.\n\n"
                "State it as one reusable insight. Reply with three lines:\nINSIGHT: <text>\n"
                "LEVEL: <task-local | subdomain | cross-domain>\nNICHE: <one niche>",
                "codream_crystallize",
            )
            for m, s, tags in survivors
        ],
        short=True,
        with_context=False,
    )
    insights = []
    for (m, _, tags), o in zip(survivors, outs, strict=False):
        ins, fb = parse_insight(o, tags[0] if tags else niche, known_niches)
        for name in fb:
            bump(name)
        if ins is not None:
            insights.append({"giver": giver_of[m], "author": m, **ins})
    return insights, counters
