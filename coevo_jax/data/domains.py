"""The task domains: one registry entry per record class (docs/design.md §5, §9).

A record's ``class`` names a :class:`Domain`, and the domain is the one place that says what
the class means to every package:

- ``required``: the record fields a record of the class must carry (``data.record``);
- ``format``: the output-format line appended to its prompts (``data.templates``);
- ``votable``: whether several agents' final answers can be compared and voted on
  (``aggregate``); open-ended classes take the most familiar agent instead;
- ``verifier``: the function that scores a completion (``rewards``), named by its import path
  ``"module:function"``.

Why the verifier is a path and not a function: this module is in layer 2 (docs/design.md §1)
so that ``data``, ``rewards``, ``aggregate`` and the orchestrators can all read it, and layer
2 may not import ``rewards`` (layer 4). ``coevo_jax.rewards.verifiers`` binds the path to the
function, and reward workers in other processes resolve the same path, so a domain registered
at run time is scored there too without the worker repeating the registration.

Adding a domain is one verifier module (a ``verify(record, completion, *, config, isolate)``
function, see ``coevo_jax.rewards.verifiers``) plus one :func:`register` call. A class that
is not registered raises :class:`UnknownClassError` wherever it is looked up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from coevo_jax._errors import UserError

# The record fields a verifier reads; a domain may require any of them. The record schema
# (data/record.py) lists them in this order on disk.
VERIFIER_FIELDS = ("true_answer", "test_cases", "fn_name", "instruction_id_list", "kwargs")

# The CERA-MoA paper gives the format as "Answer: \boxed{XX}" (docs/design.md §9, Prompts).
MATH_FORMAT = "Give your final answer in the form: Answer: \\boxed{XX}"
REASONING_FORMAT = MATH_FORMAT
CODE_FN_FORMAT = (
    "Write the Python function `{fn_name}` and return the complete code in one "
    "```python code block."
)
CODE_STDIO_FORMAT = (
    "Write a Python program that reads the input from standard input and prints the answer "
    "to standard output. Return the complete code in one ```python code block."
)

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

FormatLine = str | Callable[[Mapping[str, Any]], "str | None"] | None


class UnknownClassError(UserError, ValueError):
    """A record class that no :class:`Domain` is registered for."""


@dataclasses.dataclass(frozen=True)
class Domain:
    """One task domain. See the module docstring.

    Attributes:
      name: the value of a record's ``class``.
      verifier: ``"module:function"`` of its verifier.
      format: the format line: a string, a function of the record (for lines that depend on
        its fields), or ``None`` (the problem already says how to answer). It has no default,
        so every entry states it.
      required: fields of :data:`VERIFIER_FIELDS` every record of the class carries.
      votable: answers can be extracted, compared and voted on.
    """

    name: str
    verifier: str
    format: FormatLine
    required: tuple[str, ...] = ()
    votable: bool = False

    def __post_init__(self):
        object.__setattr__(self, "required", tuple(self.required))
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"domain name must match {_NAME.pattern}, got {self.name!r}")
        if not (self.format is None or isinstance(self.format, str) or callable(self.format)):
            raise ValueError(f"domain {self.name!r}: format must be a str, a function or None")
        if not isinstance(self.verifier, str) or not _REF.fullmatch(self.verifier):
            raise ValueError(
                f"domain {self.name!r}: verifier must be 'module:function', got {self.verifier!r}"
            )
        unknown = [f for f in self.required if f not in VERIFIER_FIELDS]
        if unknown:
            raise ValueError(
                f"domain {self.name!r}: required field(s) {unknown} are not record fields; "
                f"choose from {list(VERIFIER_FIELDS)}"
            )

    def format_line(self, record: Mapping[str, Any]) -> str | None:
        """The format line for ``record`` (a record of this class)."""
        return self.format(record) if callable(self.format) else self.format


_REGISTRY: dict[str, Domain] = {}


def register(domain: Domain, *, replace: bool = False) -> Domain:
    """Adds ``domain``; a name already taken raises unless ``replace``. Returns it."""
    if domain.name in _REGISTRY and not replace:
        raise ValueError(f"domain {domain.name!r} is already registered")
    _REGISTRY[domain.name] = domain
    return domain


def unregister(name: str) -> Domain:
    """Removes the domain ``name`` and returns it."""
    domain = get(name)
    del _REGISTRY[name]
    return domain


@contextlib.contextmanager
def registered(domain: Domain) -> Iterator[Domain]:
    """``domain`` registered for the ``with`` block (tests, one-off experiments)."""
    register(domain)
    try:
        yield domain
    finally:
        _REGISTRY.pop(domain.name, None)


def get(name: Any, *, record_id: Any = None) -> Domain:
    """The domain of class ``name``; :class:`UnknownClassError` names it (and the record)."""
    domain = _REGISTRY.get(name) if isinstance(name, str) else None
    if domain is None:
        where = f"record {record_id!r}: " if record_id is not None else ""
        raise UnknownClassError(
            f"{where}unknown record class {name!r}; registered classes: {', '.join(names())}"
        )
    return domain


def names() -> tuple[str, ...]:
    """Every registered class, in registration order (the built-ins first)."""
    return tuple(_REGISTRY)


def all_domains() -> tuple[Domain, ...]:
    """Every registered domain, in registration order."""
    return tuple(_REGISTRY.values())


def _code_format(record: Mapping[str, Any]) -> str:
    # A named function is asked for when the tests call one; else the stdin/stdout contract.
    fn = record.get("fn_name")
    return CODE_FN_FORMAT.format(fn_name=fn) if fn else CODE_STDIO_FORMAT


for _domain in (
    Domain("math", "coevo_jax.rewards.math:verify", MATH_FORMAT, ("true_answer",), votable=True),
    Domain("code", "coevo_jax.rewards.code:verify", _code_format, ("test_cases",)),
    # An IFEval prompt's own constraints are its format, so no line is added.
    Domain("if", "coevo_jax.rewards.ifeval:verify", None, ("instruction_id_list", "kwargs")),
    Domain(
        "reasoning",
        "coevo_jax.rewards.reasoning:verify",
        REASONING_FORMAT,
        ("true_answer",),
        votable=True,
    ),
):
    register(_domain)
del _domain
