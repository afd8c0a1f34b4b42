"""Source converters: one function per public dataset, row in its own format -> :class:`Record`.

``CONVERTERS`` maps each source name to its function. A converter takes
``(row, *, split, index, subset=None)`` and returns a record, a list of records (a source row
holding several items), or ``[]`` for a row this project does not use (filtered, counted).
It raises :class:`ConversionError` naming the source field for anything malformed.
"""

from __future__ import annotations

from collections.abc import Callable

from coevo_jax.data.converters._util import ConversionError, last_boxed
from coevo_jax.data.converters.code_sources import (
    convert_eurus2_code,
    convert_humaneval,
    convert_mbpp,
    convert_taco,
    humaneval_asserts,
)
from coevo_jax.data.converters.if_sources import (
    RLVR_FUNCTIONS,
    convert_ifbench,
    convert_ifeval,
    convert_magpie_if,
    convert_rlvr_ifeval,
    rlvr_to_ifeval,
)
from coevo_jax.data.converters.math_sources import (
    convert_dapo_math,
    convert_gsm8k,
    convert_math,
    convert_olympiadbench,
)
from coevo_jax.data.converters.reasoning_sources import (
    convert_agieval,
    convert_arc,
    convert_bbh,
    convert_logicbench,
)
from coevo_jax.data.record import Record

Converter = Callable[..., "Record | list[Record]"]

CONVERTERS: dict[str, Converter] = {
    # training sources (paper mixture)
    "math": convert_math,
    "dapo_math": convert_dapo_math,
    "gsm8k": convert_gsm8k,
    "mbpp": convert_mbpp,
    "eurus2_code": convert_eurus2_code,
    "taco": convert_taco,
    "magpie_if": convert_magpie_if,
    "rlvr_ifeval": convert_rlvr_ifeval,
    "bbh": convert_bbh,
    # OOD benchmarks
    "ifeval": convert_ifeval,
    "humaneval": convert_humaneval,
    "agieval": convert_agieval,
    "arc_challenge": convert_arc,
    "logicbench": convert_logicbench,
    "olympiadbench": convert_olympiadbench,
    # offline extra
    "ifbench": convert_ifbench,
}

__all__ = [
    "CONVERTERS",
    "RLVR_FUNCTIONS",
    "ConversionError",
    "humaneval_asserts",
    "last_boxed",
    "rlvr_to_ifeval",
]
