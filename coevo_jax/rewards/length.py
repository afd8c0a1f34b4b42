"""DAPO's soft overlong penalty, our reading of the seed's "linear length penalty".

    penalty(L) = 0                                  if L <= L_max - L_cache
               = ((L_max - L_cache) - L) / L_cache  if L_max - L_cache < L <= L_max
               = -1                                 if L > L_max

A pure function of arrays, usable under ``jit``/``vmap``; it is added to the verifier reward.
"""

from __future__ import annotations

from coevo_jax.rl.penalties import soft_overlong_penalty as rl_soft_overlong_penalty


def soft_overlong_penalty(lengths, max_length: int, cache_length: int):
    """Per-sequence penalty in [-1, 0] (one definition, shared with ``coevo_jax.rl``).

    Args:
      lengths: completion lengths in tokens, any shape, int or float.
      max_length: ``L_max``, the generation limit.
      cache_length: ``L_cache``, the width of the linear ramp (0 < L_cache <= L_max).

    Returns:
      float32 array of ``lengths.shape``; not differentiated (rewards are constants).
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(
            f"need 0 < cache_length <= max_length, got cache_length={cache_length}, "
            f"max_length={max_length}"
        )
    return rl_soft_overlong_penalty(lengths, max_length, cache_length)
