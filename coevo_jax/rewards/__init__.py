"""Reward verifiers (docs/design.md §5): math, code, instruction following, general reasoning.

``score(record, completion)`` dispatches on the record's class; ``score_batch`` scores many
items in a pool of killable worker processes. Each class also has its own module with a
``score`` function and a ``verify`` function of the common verifier signature (``math``,
``code``, ``ifeval``, ``reasoning``); the domain registry (``coevo_jax.data.domains``) names
each class's ``verify`` and ``verifiers`` binds the name to the function. ``length`` holds
DAPO's soft overlong penalty (it imports JAX, so it is loaded only when asked for).
"""

from coevo_jax.rewards.dispatch import (
    RewardConfig,
    RewardPool,
    record_class,
    score,
    score_batch,
)

__all__ = [
    "RewardConfig",
    "RewardPool",
    "record_class",
    "score",
    "score_batch",
    "soft_overlong_penalty",
]


def __getattr__(name):
    if name == "soft_overlong_penalty":
        from coevo_jax.rewards.length import soft_overlong_penalty

        return soft_overlong_penalty
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
