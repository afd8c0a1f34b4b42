"""Per-agent experience archive: post-task reflection and retrieval (the EvoChamber paper, individual level).

After each task every member reflects (one LLM call) on its attempt, the team's answer and
the reward, producing a niche lesson (bucketed under the task's niche) and a cross-domain
meta-insight (one pool). Both are keyed by the task's embedding. At solve time the agent
retrieves the top-k of its niche bucket and the top-k of its meta pool by cosine similarity of
those keys to the new task's embedding, and the texts are prepended to its prompts. There is
no capacity limit (the EvoChamber paper's "grow with the agent's full history").

Parsing (documented fallback, never an error): ``LESSON:`` and ``INSIGHT:`` labels are looked
for case-insensitively, each running to the next label or the end. Without a ``LESSON:``
label, the first non-empty line is the lesson (counter ``reflection_unlabeled``); an empty
reply stores nothing (counter ``reflection_empty``). A missing insight stores no insight.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coevo_jax.orchestrators.evochamber.prompts import clip
from coevo_jax.orchestrators.evochamber.state import Agent, Entry, bytes_to_vec

_LABELS = re.compile(r"(lesson|insight|meta[- ]?insight)\s*:\s*", re.I)
MAX_LESSON_CHARS = 300


def top_k(entries: Sequence[Entry], query: np.ndarray, k: int) -> list[Entry]:
    """The ``k`` entries whose key is most cosine-similar to ``query`` [D] (keys are unit
    vectors); ties -> the older entry. Keys of another dimension are skipped."""
    cand = [e for e in entries if len(e.key) == 4 * query.shape[-1]]
    if not cand or k <= 0:
        return []
    sims = np.stack([bytes_to_vec(e.key) for e in cand]) @ np.asarray(query, np.float32)
    return [cand[i] for i in np.argsort(-sims, kind="stable")[:k]]


def retrieve(agent: Agent, niche: str, query: np.ndarray, k: int) -> tuple[list[str], list[str]]:
    """(niche lessons, meta-insights) texts for ``agent`` on a task embedded as ``query``."""
    lessons = top_k(agent.lessons.get(niche, ()), query, k)
    metas = top_k(agent.meta, query, k)
    return [e.text for e in lessons], [e.text for e in metas]


def reflection_prompt(
    record: Mapping[str, Any], attempt: str | None, final: str, reward: float
) -> str:
    own = clip(attempt, 800) if attempt else "(you solved a part of it; see the team answer)"
    return (
        f"Task:\n{str(record['problem']).strip()[:1000]}\n\nYour attempt (end):\n{own}\n\n"
        f"Team answer (end):\n{clip(final, 600)}\n\nReward: {reward:.2f} "
        f"({'correct' if reward >= 0.5 else 'incorrect'}).\n\nReflect on what went right or "
        "wrong. Reply with exactly two lines:\n"
        "LESSON: <one concrete lesson for tasks of this kind>\n"
        "INSIGHT: <one general strategy that applies to any domain>"
    )


def _tidy(s: str) -> str:
    return " ".join(s.split())[:MAX_LESSON_CHARS]


def parse_reflection(text: str) -> tuple[str | None, str | None, str | None]:
    """(lesson, insight, fallback counter name or None); see the module docstring."""
    text = text or ""
    if not text.strip():
        return None, None, "reflection_empty"
    found: dict[str, str] = {}
    marks = list(_LABELS.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        label = "lesson" if m.group(1).lower() == "lesson" else "insight"
        body = _tidy(text[m.end() : end])
        if body and label not in found:
            found[label] = body
    if "lesson" in found:
        return found["lesson"], found.get("insight"), None
    if marks:  # only an insight label: what precedes it, if anything, is the lesson
        lead = _tidy(text[: marks[0].start()])
        return (lead or None), found.get("insight"), "reflection_unlabeled"
    return _tidy(next(ln for ln in text.splitlines() if ln.strip())), None, "reflection_unlabeled"
