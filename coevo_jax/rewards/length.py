"""DAPO's soft overlong penalty, our reading of the CERA-MoA paper's "linear length penalty".

The formula, from the DAPO paper (docs/design.md §5):

    penalty(L) = 0                                  if L <= L_max - L_cache
               = ((L_max - L_cache) - L) / L_cache  if L_max - L_cache < L <= L_max
               = -1                                 if L > L_max

This is the one definition; ``coevo_jax.rl.penalties`` re-exports it for the training loop.
"""

from __future__ import annotations

import jax.numpy as jnp


def soft_overlong_penalty(lengths, max_length: int, cache_length: int) -> jnp.ndarray:
    """Per-sequence penalty in ``[-1, 0]`` added to a completion's reward (DAPO Eq. 13).

    A pure function of arrays, usable under ``jit``/``vmap``. With ``cache_length = 0`` the
    band is empty: only completions longer than ``max_length`` are penalised (a hard limit).
    Matches TRL 1.16's ``get_soft_overlong_punishment`` for ``cache_length > 0``.

    Args:
      lengths: ``[...]`` completion lengths in tokens, int or float.
      max_length: ``L_max``, the generation limit.
      cache_length: ``L_cache``, the width of the linear ramp, ``0 <= L_cache <= L_max``.

    Returns:
      ``[...]`` float32 penalties; piecewise linear in the lengths and not meant to be
      differentiated (rewards are constants).

    Raises:
      ValueError: ``cache_length`` is outside ``[0, max_length]``.
    """
    if not 0 <= cache_length <= max_length:
        raise ValueError(
            f"need 0 <= cache_length <= max_length, got cache_length={cache_length}, "
            f"max_length={max_length}"
        )
    n = jnp.asarray(lengths, jnp.float32)
    start = float(max_length - cache_length)
    band = (start - n) / max(cache_length, 1)
    return jnp.where(n <= start, 0.0, jnp.where(n <= max_length, band, -1.0)).astype(jnp.float32)
