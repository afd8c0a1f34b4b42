"""Final-answer extraction shared by the orchestrators' scoring and EvoChamber's answer keys.

It sits below both :mod:`coevo_jax.orchestrators.scoring` and
:mod:`coevo_jax.orchestrators.evochamber.prompts` (which re-exports :func:`last_boxed`), so
scoring need not import the ``evochamber`` package, whose loop imports scoring. The box is
found by the math verifier's own extractor, so orchestration and training read an answer
alike.
"""

from __future__ import annotations

from coevo_jax.rewards.math import last_boxed as _verifier_last_boxed

__all__ = ["last_boxed"]


def last_boxed(text: str) -> str | None:
    """Stripped contents of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``), or None."""
    boxed = _verifier_last_boxed(text)
    return None if boxed is None else boxed.strip()
