"""The verifier half of the domain registry: each class's verifier path bound to its function.

The registry itself (class names, required fields, format lines, whether answers are
votable, and the verifier's import path) is ``coevo_jax.data.domains``, in layer 2 so that
``data``, ``aggregate`` and the orchestrators read it too (docs/design.md §1). Verifiers live
here in layer 4, which layer 2 may not import; so a domain names its verifier as
``"module:function"`` and this module imports it on first use. Reward workers resolve the
same path in their own process (``dispatch``), so nothing else has to be registered there.

A verifier is a function

    verify(record, completion, *, config, isolate) -> float

- ``record``: the record's JSON form as a plain ``dict`` (every key of docs/design.md §9,
  ``None`` where absent), so that it pickles to a worker;
- ``completion``: the model's output;
- ``config``: the :class:`~coevo_jax.rewards.dispatch.RewardConfig` (a class reads its own
  fields, if it has any);
- ``isolate``: True when the verifier runs in the caller's process and must bound its own
  slow stages (math runs SymPy in a killable child); False inside a reward worker, which the
  pool kills past the class's deadline.

It returns a reward in [0, 1]. An exception it raises scores 0 for that item (logged), so a
verifier bug costs one item and never the run. The batch deadline of a class is
``RewardConfig.timeout_for(name)``: its ``<name>_timeout_s`` field if it has one, else
``default_timeout_s``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from coevo_jax.data import domains

if TYPE_CHECKING:  # annotation only: dispatch imports this module
    from coevo_jax.rewards.dispatch import RewardConfig


class Verifier(Protocol):
    """The verifier signature; see the module docstring."""

    def __call__(
        self, record: Mapping[str, Any], completion: str, *, config: RewardConfig, isolate: bool
    ) -> float: ...


class VerifierError(LookupError):
    """A domain's verifier path does not lead to a function."""


@functools.cache
def resolve(ref: str) -> Verifier:
    """The function named by ``ref`` (``"module:function"``); :class:`VerifierError` if none."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise VerifierError(f"verifier {ref!r}: cannot import {module_name!r} ({e})") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise VerifierError(f"verifier {ref!r}: {module_name} has no function {attr!r}")
    return fn


def verifier_for(cls: Any, *, record_id: Any = None) -> Verifier:
    """The verifier of class ``cls``.

    Raises:
      domains.UnknownClassError: ``cls`` is not registered (names the record when given).
      VerifierError: its verifier path does not resolve (names the class).
    """
    domain = domains.get(cls, record_id=record_id)
    try:
        return resolve(domain.verifier)
    except VerifierError as e:
        raise VerifierError(f"class {domain.name!r}: {e}") from e


def check_registry() -> dict[str, Verifier]:
    """Every registered class's verifier, resolved; raises on the first that is missing."""
    return {name: verifier_for(name) for name in domains.names()}
