"""DAPO's soft overlong penalty (DESIGN §5: our reading of the seed's "linear length penalty")."""

from __future__ import annotations

import jax.numpy as jnp


def soft_overlong_penalty(lengths, max_len: int, cache_len: int) -> jnp.ndarray:
    """Length penalty added to a completion's reward (DAPO Eq. 13).

    ``0`` for ``L <= max_len - cache_len``; ``((max_len - cache_len) - L) / cache_len`` for
    ``max_len - cache_len < L <= max_len`` (linear from 0 down to -1); ``-1`` beyond
    ``max_len``. With ``cache_len = 0`` only completions longer than ``max_len`` are penalised.

    Args:
      lengths: ``[...]`` int completion lengths in tokens.
      max_len: L_max, the generation limit.
      cache_len: L_cache, the width of the soft band, ``0 <= cache_len <= max_len``.

    Returns:
      ``[...]`` float32 penalties in ``[-1, 0]``. Piecewise linear in the lengths (not meant
      to be differentiated).
    """
    if not 0 <= cache_len <= max_len:
        raise ValueError(
            f"need 0 <= cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}"
        )
    n = jnp.asarray(lengths, jnp.float32)
    start = float(max_len - cache_len)
    band = (start - n) / max(cache_len, 1)
    return jnp.where(n <= start, 0.0, jnp.where(n <= max_len, band, -1.0)).astype(jnp.float32)
