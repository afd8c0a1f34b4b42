"""The unified record every data source is converted to (docs/design.md §9).

A record is one training or evaluation query plus the metadata its verifier needs:

- ``math`` / ``reasoning``: ``true_answer`` (a string the math or reasoning verifier compares
  the last ``\\boxed{}`` of a completion against);
- ``code``: ``test_cases`` and, for call-form tasks, ``fn_name``. ``test_cases`` follows the
  TACO/APPS ``input_output`` convention: ``{"inputs": [...], "outputs": [...]}`` where, without
  ``fn_name``, every input is a stdin string (or a list of lines) and every output the
  expected stdout; with ``fn_name`` every input is the list of positional arguments and every
  output the expected return value. MBPP and HumanEval use the ``{"asserts": [str, ...]}``
  form instead (optionally with ``"setup"`` code run before each): each string is Python
  source that raises when the candidate program is wrong. This is the contract of
  ``coevo_jax.rewards.code.score``;
- ``if``: ``instruction_id_list`` and ``kwargs`` (one dict per instruction id, IFEval's
  registry names).

On disk a record is one JSON object per line. The Python attribute for the class is ``cls``
(``class`` is a keyword); the JSON key is ``"class"``. Validation never repairs anything: a
record that breaks a rule raises :class:`RecordError` naming the field.

Which fields a class requires, and which classes exist, is the domain registry's
(``coevo_jax.data.domains``); this module checks the shape of each field and asks the
registry what a record's class needs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from coevo_jax._errors import UserError
from coevo_jax.data import domains
from coevo_jax.data.domains import VERIFIER_FIELDS, Domain, UnknownClassError

# JSON key order on disk; the byte-identical-output guarantee of the mixtures relies on it.
_KEYS = ("id", "source", "split", "class", "problem", *VERIFIER_FIELDS, "metadata")
_OPTIONAL = (*VERIFIER_FIELDS, "metadata")


def __getattr__(name: str) -> Any:
    # ``CLASSES`` was a fixed tuple here; it now reads the registry at each access, so a
    # domain registered later is included.
    if name == "CLASSES":
        return domains.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RecordError(UserError, ValueError):
    """A record (or a line that should hold one) is malformed.

    ``path`` and ``line`` say where it was read (``None`` for an in-memory record); ``field`` is
    the offending key (``None`` when the line is not a JSON object at all).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        path: str | None = None,
        line: int | None = None,
        record_id: str | None = None,
    ):
        self.message = message
        self.field = field
        self.path = path
        self.line = line
        self.record_id = record_id
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        what = f"record {self.record_id!r} " if self.record_id else ""
        fld = f"field {self.field!r}: " if self.field else ""
        return f"{where}{what}{fld}{self.message}"

    def at(self, path: str, line: int | None) -> RecordError:
        """The same error, located at ``path:line``."""
        return RecordError(
            self.message, field=self.field, path=path, line=line, record_id=self.record_id
        )


@dataclasses.dataclass(frozen=True)
class Record:
    """One query with its verifier metadata. See the module docstring for the schema."""

    id: str
    source: str
    split: str
    cls: str
    problem: str
    true_answer: str | None = None
    test_cases: dict[str, Any] | None = None
    fn_name: str | None = None
    instruction_id_list: tuple[str, ...] | None = None
    kwargs: tuple[dict[str, Any], ...] | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        # Lists from JSON become tuples so a record cannot be mutated through its fields' shape.
        if isinstance(self.instruction_id_list, list):
            object.__setattr__(self, "instruction_id_list", tuple(self.instruction_id_list))
        if isinstance(self.kwargs, list):
            object.__setattr__(self, "kwargs", tuple(self.kwargs))
        validate(self)

    # Dict-style read access, so code written against the JSON form (``r["class"]``) works on
    # records too.
    def __getitem__(self, key: str) -> Any:
        if key == "class":
            return self.cls
        if key in _KEYS:
            return getattr(self, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            value = self[key]
        except KeyError:
            return default
        return default if value is None else value

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: key ``"class"``, lists instead of tuples, ``None`` fields left out."""
        out: dict[str, Any] = {}
        for key in _KEYS:
            value = self[key]
            if key in _OPTIONAL and (value is None or (key == "metadata" and not value)):
                continue
            if isinstance(value, tuple):
                value = list(value)
            out[key] = value
        return out

    def to_json(self) -> str:
        """One line of canonical JSON (fixed key order, UTF-8 kept as is, no trailing newline)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Record:
        """Build from the JSON form; unknown or missing keys raise :class:`RecordError`."""
        if not isinstance(d, Mapping):
            raise RecordError(f"expected a JSON object, got {type(d).__name__}")
        rid = d.get("id") if isinstance(d.get("id"), str) else None
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise RecordError(
                f"unknown key(s) {unknown}; allowed: {list(_KEYS)}", field=unknown[0], record_id=rid
            )
        for key in ("id", "source", "split", "class", "problem"):
            if key not in d:
                raise RecordError("missing", field=key, record_id=rid)
        kw = {("cls" if k == "class" else k): v for k, v in d.items()}
        if kw.get("metadata") is None:
            kw["metadata"] = {}
        return cls(**kw)


def _need_str(value: Any, field: str, rid: str | None, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise RecordError(f"expected str, got {type(value).__name__}", field=field, record_id=rid)
    if not allow_empty and not value.strip():
        raise RecordError("empty", field=field, record_id=rid)


def _check_json_value(value: Any, field: str, rid: str | None) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise RecordError(f"not JSON-serialisable: {e}", field=field, record_id=rid) from None


def _is_text(x: Any) -> bool:
    """A stdin/stdout value: a string, or a list of lines (joined with newlines)."""
    return isinstance(x, str) or (isinstance(x, list) and all(isinstance(t, str) for t in x))


def validate_test_cases(tc: Any, fn_name: str | None, rid: str | None = None) -> None:
    """Check the ``test_cases`` shape (see the module docstring); raise :class:`RecordError`."""
    f = "test_cases"
    if not isinstance(tc, Mapping):
        raise RecordError(f"expected an object, got {type(tc).__name__}", field=f, record_id=rid)
    extra = sorted(set(tc) - {"inputs", "outputs", "asserts", "setup", "fn_name"})
    if extra:
        raise RecordError(f"unknown key(s) {extra}", field=f, record_id=rid)
    has_io = "inputs" in tc or "outputs" in tc
    if not has_io and "asserts" not in tc:
        raise RecordError("needs 'inputs'/'outputs' or 'asserts'", field=f, record_id=rid)
    if "setup" in tc and not isinstance(tc["setup"], str):
        raise RecordError("'setup' must be a str", field=f, record_id=rid)
    if "asserts" in tc:
        asserts = tc["asserts"]
        if not isinstance(asserts, list) or not asserts:
            raise RecordError("'asserts' must be a non-empty list", field=f, record_id=rid)
        for i, a in enumerate(asserts):
            if not isinstance(a, str) or not a.strip():
                raise RecordError(f"asserts[{i}] must be a non-empty str", field=f, record_id=rid)
    if has_io:
        ins, outs = tc.get("inputs"), tc.get("outputs")
        if not isinstance(ins, list) or not isinstance(outs, list):
            raise RecordError("'inputs' and 'outputs' must both be lists", field=f, record_id=rid)
        if len(ins) != len(outs):
            raise RecordError(f"{len(ins)} inputs but {len(outs)} outputs", field=f, record_id=rid)
        if not ins:
            raise RecordError("no test cases", field=f, record_id=rid)
        if (fn_name or tc.get("fn_name")) is None:
            for i, (a, b) in enumerate(zip(ins, outs, strict=True)):
                if not _is_text(a) or not _is_text(b):
                    raise RecordError(
                        f"case {i}: stdin/stdout cases need str (or list-of-lines) inputs and "
                        "outputs; give fn_name for call-form cases",
                        field=f,
                        record_id=rid,
                    )
    _check_json_value(dict(tc), f, rid)


def _domain(r: Record, rid: str | None) -> Domain:
    try:
        return domains.get(r.cls)
    except UnknownClassError:
        raise RecordError(
            f"{r.cls!r} is not a registered class; registered: {domains.names()}",
            field="class",
            record_id=rid,
        ) from None


def _required(r: Record, domain: Domain, field: str, rid: str | None) -> None:
    """Raise if ``domain`` requires ``field`` and ``r`` lacks it."""
    if field in domain.required and getattr(r, field) is None:
        raise RecordError(f"missing (required for class {r.cls!r})", field=field, record_id=rid)


def validate(r: Record) -> None:
    """Check every rule of the schema; raise :class:`RecordError` naming the field.

    Presence is checked against the class's domain (``domains.get(cls).required``) just
    before each field's shape, so a record with several faults reports the first in schema
    order.
    """
    rid = r.id if isinstance(r.id, str) else None
    _need_str(r.id, "id", None)
    _need_str(r.source, "source", rid)
    _need_str(r.split, "split", rid)
    domain = _domain(r, rid)
    _need_str(r.problem, "problem", rid)
    _required(r, domain, "fn_name", rid)
    if r.fn_name is not None:
        _need_str(r.fn_name, "fn_name", rid)
        if not r.fn_name.isidentifier():
            raise RecordError(f"{r.fn_name!r} is not an identifier", field="fn_name", record_id=rid)
    if not isinstance(r.metadata, Mapping):
        raise RecordError(
            f"expected an object, got {type(r.metadata).__name__}", field="metadata", record_id=rid
        )
    _check_json_value(dict(r.metadata), "metadata", rid)
    _required(r, domain, "true_answer", rid)
    if r.true_answer is not None:
        _need_str(r.true_answer, "true_answer", rid)
    _required(r, domain, "test_cases", rid)
    if r.test_cases is not None:
        validate_test_cases(r.test_cases, r.fn_name, rid)
    _required(r, domain, "instruction_id_list", rid)
    _required(r, domain, "kwargs", rid)
    _check_instructions(r, rid)


def _check_instructions(r: Record, rid: str | None) -> None:
    """The shapes of ``instruction_id_list`` and ``kwargs`` (IFEval's registry names)."""
    if r.instruction_id_list is not None:
        ids = r.instruction_id_list
        if not isinstance(ids, tuple) or not ids:
            raise RecordError(
                "expected a non-empty list", field="instruction_id_list", record_id=rid
            )
        for i, x in enumerate(ids):
            if not isinstance(x, str) or not x:
                raise RecordError(
                    f"item {i} must be a non-empty str", field="instruction_id_list", record_id=rid
                )
    if r.kwargs is not None:
        if not isinstance(r.kwargs, tuple):
            raise RecordError("expected a list of objects", field="kwargs", record_id=rid)
        for i, x in enumerate(r.kwargs):
            if not isinstance(x, Mapping):
                raise RecordError(
                    f"item {i} must be an object, got {type(x).__name__}",
                    field="kwargs",
                    record_id=rid,
                )
        if r.instruction_id_list is not None and len(r.kwargs) != len(r.instruction_id_list):
            raise RecordError(
                f"{len(r.kwargs)} kwargs for {len(r.instruction_id_list)} instruction ids",
                field="kwargs",
                record_id=rid,
            )
        _check_json_value(list(r.kwargs), "kwargs", rid)
