"""The rollout engines by name, and what each one declares about itself.

One vocabulary serves every command (``coevo train``/``eval`` through ``rollout.engine``,
``coevo serve --engine``, the orchestrators' ``engine``): ``inprocess``, ``http`` and
``vllm``. Code that must treat engines differently asks an :class:`EngineSpec` property
("are its log-probs exact?", "does publishing write adapter files?"), never the name; the
builders that turn a name into an engine are keyed by the same names
(``coevo_jax.train.setup.make_engine``), and a test checks both tables agree and that no
other module compares an engine name as a string.

``local``, the old name of ``coevo serve``'s JAX server, is kept as an alias of
``inprocess`` for one release; :func:`engine_spec` says so when it is used.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """One engine kind.

    Attributes:
      name: the name every command takes.
      exact_logprobs: the engine samples with the trainer's own forward pass, so its
        behaviour log-probs are the trainer's by construction (no self-check, no recompute).
      adapter_files: publishing an adapter writes PEFT files that a server loads.
      needs_urls: the engine talks to servers the user started (``rollout.urls``).
      needs_vllm: the engine starts a vLLM server from the project's vLLM venv.
      loads_weights: the engine samples in this process, on weights loaded here (a server
        engine needs only the tokenizer here).
      help: one line for ``--help``.
    """

    name: str
    exact_logprobs: bool
    adapter_files: bool
    needs_urls: bool
    needs_vllm: bool
    loads_weights: bool
    help: str


ENGINES: dict[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        EngineSpec(
            "inprocess",
            exact_logprobs=True,
            adapter_files=False,
            needs_urls=False,
            needs_vllm=False,
            loads_weights=True,
            help="the JAX sampler in this process (CPU default; exact log-probs)",
        ),
        EngineSpec(
            "http",
            exact_logprobs=False,
            adapter_files=True,
            needs_urls=True,
            needs_vllm=False,
            loads_weights=False,
            help="servers you started (vLLM or `coevo serve`), reached at rollout.urls",
        ),
        EngineSpec(
            "vllm",
            exact_logprobs=False,
            adapter_files=True,
            needs_urls=False,
            needs_vllm=True,
            loads_weights=False,
            help="a vLLM server this run starts and stops (the project's vLLM venv)",
        ),
    )
}

ALIASES: dict[str, str] = {"local": "inprocess"}


def engine_names() -> tuple[str, ...]:
    """The engine names, in the order commands list them."""
    return tuple(ENGINES)


def canonical_engine(name: str, *, warn: bool = True) -> str:
    """``name`` itself, or the engine an alias stands for (telling stderr once per call when
    ``warn``).

    Raises:
      ValueError: not an engine name, with the known names and the closest one.
    """
    if name in ENGINES:
        return name
    if name in ALIASES:
        target = ALIASES[name]
        if warn:
            print(
                f"note: engine {name!r} is now called {target!r}; {name!r} is kept as an alias "
                "for one release",
                file=sys.stderr,
            )
        return target
    close = difflib.get_close_matches(name, [*ENGINES, *ALIASES], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown engine {name!r}{hint}; choose from {', '.join(ENGINES)}")


def engine_spec(name: str) -> EngineSpec:
    """The :class:`EngineSpec` of ``name`` (an alias is accepted; see :func:`canonical_engine`)."""
    return ENGINES[canonical_engine(name, warn=False)]


def engine_arg(text: str) -> str:
    """An argparse ``type``: the canonical engine name of ``text`` (aliases accepted)."""
    try:
        return canonical_engine(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
