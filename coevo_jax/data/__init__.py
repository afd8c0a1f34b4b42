"""Data: the unified record schema, source converters, offline builders, mixtures, prompts.

docs/design.md §9. Entry points:

- :class:`Record`, :func:`read_records`, :func:`write_records` (JSONL with validation);
- :func:`load_source` (HF hub or local files, any of the paper's 15 sources) and
  :func:`build_offline` (benchmarks shipped in PyPI packages);
- :func:`build_mixture` / :func:`write_mixture` / :func:`read_mixture` (``paper`` and
  ``cpu``), also as ``coevo data build``;
- :func:`render_prompt` and :func:`render_chat` (zero-shot templates, left truncation);
- ``domains``: the registry of record classes (:class:`Domain`, ``domains.register``).
"""

from coevo_jax.data import domains
from coevo_jax.data.converters import CONVERTERS, ConversionError
from coevo_jax.data.domains import Domain, UnknownClassError
from coevo_jax.data.jsonl import iter_records, read_records, write_records
from coevo_jax.data.mixtures import (
    MIXTURES,
    build_mixture,
    is_heldout,
    read_mixture,
    write_mixture,
)
from coevo_jax.data.offline import OFFLINE_BUILDERS, build_offline
from coevo_jax.data.record import Record, RecordError, validate
from coevo_jax.data.sources import SOURCES, LoadReport, load_source
from coevo_jax.data.templates import chat_messages, format_line, render_chat, render_prompt

__all__ = [
    "CLASSES",
    "CONVERTERS",
    "MIXTURES",
    "OFFLINE_BUILDERS",
    "SOURCES",
    "ConversionError",
    "Domain",
    "LoadReport",
    "Record",
    "RecordError",
    "UnknownClassError",
    "build_mixture",
    "build_offline",
    "chat_messages",
    "domains",
    "format_line",
    "is_heldout",
    "iter_records",
    "load_source",
    "read_mixture",
    "read_records",
    "render_chat",
    "render_prompt",
    "validate",
    "write_mixture",
    "write_records",
]


def __getattr__(name):
    # CLASSES reads the domain registry at each access (a domain may be registered later).
    if name == "CLASSES":
        return domains.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
