"""The verifier module of the toy domain that tests/rewards/test_domains.py registers.

It is what a new domain adds besides its registry entry: one ``verify`` function with the
verifier signature of ``coevo_jax.rewards.verifiers``. The toy task: repeat ``true_answer`` in
capital letters on the last line of the reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def verify(record: Mapping[str, Any], completion: str, *, config: Any, isolate: bool) -> float:
    """1.0 when the last non-empty line of ``completion`` is ``true_answer`` upper-cased."""
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return float(bool(lines) and lines[-1] == record["true_answer"].upper())
