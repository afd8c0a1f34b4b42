"""DAPO's soft overlong penalty, re-exported for the policy side of the loop.

The definition (and its contract) lives in ``coevo_jax.rewards.length``: the penalty is reward
shaping, added to the verifier reward before advantages are computed.
"""

from __future__ import annotations

from coevo_jax.rewards.length import soft_overlong_penalty

__all__ = ["soft_overlong_penalty"]
