"""Final-answer extraction shared by the orchestrators' scoring and EvoChamber's answer keys.

It sits below both :mod:`coevo_jax.orchestrators.scoring` and
:mod:`coevo_jax.orchestrators.evochamber.prompts` (which re-exports :func:`last_boxed`), so
scoring need not import the ``evochamber`` package, whose loop imports scoring.
"""

from __future__ import annotations

__all__ = ["last_boxed"]


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` with balanced braces, or None."""
    start = text.rfind("\\boxed")
    while start != -1:
        i = text.find("{", start)
        if i == -1:
            return None
        depth = 0
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j].strip()
        start = text.rfind("\\boxed", 0, start)
    return None
