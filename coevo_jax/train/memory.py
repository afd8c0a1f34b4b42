"""Giving the allocator's free memory back to the OS between rounds, so resident memory stays flat.

A CERA-MoA round on CPU allocates and frees gigabytes through glibc ``malloc``: XLA's
scratch and result buffers of the sampler, the gap recompute and the policy step, host
copies, the reward workers' results. glibc returns a freed block to the OS only when it
was ``mmap``-ed or sits at the top of its heap, and its mmap threshold rises to the size of
the largest freed mmap-ed block (up to 32 MiB), so after the first big free most buffers come
from the main heap and the per-thread arenas of XLA's thread pool, where freed pages stay
resident. Nothing is referenced, yet the process's resident memory grew by about a third
of a gigabyte a round on ``configs/cpu_reference_mixture.yaml`` until the kernel killed it
(``benchmarks/HISTORY.md``, 2026-12-05). ``malloc_trim(0)`` hands every free page of every
arena back; the trainer calls :func:`release_free_memory` at the end of each round.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_free_memory() -> bool:
    """Returns the C heap's free pages to the OS (glibc ``malloc_trim(0)``).

    Frees nothing that is in use; the next allocations fault their pages in again, which XLA's
    freshly allocated buffers do anyway. A no-op returning False where the C library has no
    ``malloc_trim``.

    Returns:
      True when memory was released.
    """
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False
