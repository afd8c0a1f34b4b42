"""Whether this machine multiplies bf16 matrices natively, and the advice that follows.

``RLConfig.matmul_dtype = "bfloat16"`` is the fast CPU setting only where the CPU has bf16
dot-product instructions (AVX512-BF16 or AMX-BF16). Elsewhere XLA:CPU converts the operands
and runs the product in fp32, so the "fast" setting is the slow one, with nothing in the
output to say so. The trainer checks once and warns (``benchmarks/HISTORY.md`` has the
figures). Written by hand: the flags come from ``/proc/cpuinfo``, which no dependency of
ours reads.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax

#: ``/proc/cpuinfo`` flags of native bf16 dot products: x86 (AVX512-BF16, AMX) and ARM
#: (``bf16``, the BFMMLA instructions).
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


@functools.lru_cache(maxsize=1)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The first CPU's feature flags, or None where the file is missing (not Linux)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, ARM
            return frozenset(value.split())
    return None


def native_bf16_matmul(backend: str | None = None, flags: frozenset[str] | None = None) -> bool:
    """True unless JAX computes on a CPU known to lack native bf16 dot products.

    Args:
      backend: ``jax.default_backend()`` when None; GPUs and TPUs count as native.
      flags: CPU flags; :func:`cpu_flags` when None. Unknown flags (no ``/proc/cpuinfo``)
        count as native, so the caller stays silent rather than guessing.
    """
    if (backend or jax.default_backend()) != "cpu":
        return True
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return True
    return bool(flags & BF16_FLAGS)


def matmul_dtype_warning(
    matmul_dtype: str | None, *, backend: str | None = None, flags: frozenset[str] | None = None
) -> str | None:
    """A one-line warning when ``matmul_dtype`` is bf16 on a CPU without native bf16 GEMMs.

    Returns None when there is nothing to say (fp32, an accelerator, or a bf16-capable CPU).
    """
    if matmul_dtype != "bfloat16" or native_bf16_matmul(backend, flags):
        return None
    return (
        "rl.matmul_dtype=bfloat16 on a CPU without AVX512-BF16 or AMX: XLA converts the "
        "operands and multiplies in fp32, which is slower than rl.matmul_dtype=float32 here"
    )
