"""Helpers shared by the source converters: typed field access, answer extraction, choices."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from coevo_jax._errors import UserError


class ConversionError(UserError, ValueError):
    """A source row cannot become a record; ``field`` names the source field at fault."""

    def __init__(self, message: str, *, field: str | None = None):
        self.message = message
        self.field = field
        super().__init__(f"field {field!r}: {message}" if field else message)


_TYPE_NAMES = {str: "str", int: "int", list: "list", dict: "object", bool: "bool", float: "float"}


def need(row: Any, key: str, typ: type | tuple[type, ...] = str, *, path: str | None = None) -> Any:
    """``row[key]`` checked for presence and type; empty strings count as missing.

    ``path`` is the dotted name used in the error (defaults to ``key``).
    """
    name = path or key
    if not isinstance(row, dict):
        raise ConversionError(f"expected an object, got {type(row).__name__}", field=name)
    if key not in row or row[key] is None:
        raise ConversionError("missing", field=name)
    value = row[key]
    types = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise ConversionError(f"expected {want}, got {type(value).__name__}", field=name)
    if isinstance(value, str) and not value.strip():
        raise ConversionError("empty", field=name)
    return value


def opt(row: dict, key: str, typ: type | tuple[type, ...] = str, default: Any = None) -> Any:
    """Like :func:`need` but a missing, null or blank-string field gives ``default``."""
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    return need(row, key, typ)


def json_field(row: dict, key: str, *, path: str | None = None) -> Any:
    """A field that sources store either as a JSON string or already parsed."""
    value = need(row, key, (str, dict, list), path=path)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ConversionError(f"not valid JSON: {e}", field=path or key) from None
    return value


def pyliteral_or_json(value: str, field: str) -> Any:
    """Parse a string some sources write as JSON and others as a Python literal."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError) as e:
        raise ConversionError(f"neither JSON nor a Python literal: {e}", field=field) from None


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced.

    Used only to read reference answers out of reference solutions (MATH); the verifier has
    its own extractor for completions.
    """
    starts = sorted((m.end(), m.start()) for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text))
    for body_start, _ in reversed(starts):
        depth = 1
        for j in range(body_start, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[body_start:j].strip()
    return None


LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def format_choices(question: str, options: list[str], labels: list[str] | None = None) -> str:
    """``question`` followed by one ``(L) option`` line per choice."""
    labels = labels or list(LETTERS[: len(options)])
    lines = [question.rstrip(), ""]
    lines += [f"({lab}) {str(opt).strip()}" for lab, opt in zip(labels, options, strict=True)]
    return "\n".join(lines)


def drop_nulls(kwargs: list[Any], field: str = "kwargs") -> list[dict[str, Any]]:
    """IFEval-style kwargs with ``None`` values removed.

    HF's Arrow schema gives every kwargs dict every key of every instruction, unused ones as
    null; the IFEval registry takes only the keys an instruction declares, so the nulls are
    schema filler, not data.
    """
    out = []
    for i, kw in enumerate(kwargs):
        if kw is None:
            kw = {}
        if not isinstance(kw, dict):
            raise ConversionError(f"item {i} is {type(kw).__name__}, not an object", field=field)
        out.append({k: v for k, v in kw.items() if v is not None})
    return out


def user_message(messages: Any, field: str) -> str:
    """Content of the last ``user`` turn of a chat-format prompt."""
    if not isinstance(messages, list) or not messages:
        raise ConversionError("expected a non-empty list of messages", field=field)
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ConversionError("no message with role 'user'", field=field)
    content = users[-1].get("content")
    if not isinstance(content, str) or not content.strip():
        raise ConversionError("the user message has no text content", field=f"{field}.content")
    return content
