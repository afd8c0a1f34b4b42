"""Task prompts and answer keys shared by the structures, reflection and CoDream.

The task prompt follows docs/design.md §9: the raw problem plus one output-format line (the data
package's templates). A member's
prompt is that, preceded by its persona and its retrieved experience. ``answer_key`` reduces
a completion to the thing members vote on and disagree about: the last balanced ``\\boxed{}``
(else the last number) for math and reasoning, the last fenced code block with whitespace
collapsed for code. It is deliberately small: scoring is the reward function's job, this only
decides "same answer or not".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from coevo_jax.data.templates import format_line as data_format_line
from coevo_jax.orchestrators.answers import last_boxed

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_FENCE = re.compile(r"```(?:[a-zA-Z0-9_+-]*)\n(.*?)```", re.S)


def format_line(record: Mapping[str, Any]) -> str:
    """The data package's format line for the record's class (docs/design.md §9); a record without a
    known class gets the ``\\boxed{}`` line, an instruction-following one none."""
    try:
        line = data_format_line(record)
    except (KeyError, ValueError):
        return "Put your final answer within \\boxed{}."
    return line or ""


def task_prompt(record: Mapping[str, Any]) -> str:
    """The bare task: problem + one format line."""
    line = format_line(record)
    return f"{str(record['problem']).strip()}\n\n{line}" if line else str(record["problem"]).strip()


def member_prompt(persona: str, lessons: Sequence[str], metas: Sequence[str], body: str) -> str:
    """``body`` preceded by the persona and the agent's retrieved experience (if any)."""
    parts = [persona.strip()] if persona.strip() else []
    if lessons:
        parts.append("Lessons from similar past tasks:\n" + "\n".join(f"- {t}" for t in lessons))
    if metas:
        parts.append("General insights:\n" + "\n".join(f"- {t}" for t in metas))
    parts.append(body)
    return "\n\n".join(parts)


def answer_key(record: Mapping[str, Any], text: str | None) -> str | None:
    """What members vote on: see the module docstring. None when nothing is extractable."""
    if not text:
        return None
    if record.get("class") == "code":
        blocks = _FENCE.findall(text)
        code = blocks[-1] if blocks else text
        key = " ".join(code.split())
        return key or None
    boxed = last_boxed(text)
    if boxed is not None:
        return " ".join(boxed.replace("$", "").split()) or None
    nums = _NUMBER.findall(text)
    return nums[-1] if nums else None


def plurality(keys: Sequence[str | None]) -> int | None:
    """Index of the first member holding the most common non-None key (ties -> earliest
    member, i.e. the anchor first: it leads); None when no key exists."""
    counts: dict[str, int] = {}
    for k in keys:
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    for i, k in enumerate(keys):
        if k is not None and counts[k] == best:
            return i
    return None


def clip(text: str, n: int = 600) -> str:
    """Shortens ``text`` for inclusion in another prompt (keeps the tail: answers live there)."""
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]
