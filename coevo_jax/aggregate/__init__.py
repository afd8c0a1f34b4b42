"""Inference-time aggregation of the activated agents' answers (docs/design.md §2, Inference)."""

from coevo_jax.aggregate.vote import Aggregate, aggregate, familiarity_weighted_vote, most_familiar

__all__ = ["Aggregate", "aggregate", "familiarity_weighted_vote", "most_familiar"]
