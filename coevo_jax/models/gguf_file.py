"""Opening a llama.cpp GGUF file and reading its metadata: the part of GGUF loading that the
weights (:mod:`coevo_jax.models.gguf`) and the tokenizer (:mod:`coevo_jax.models.tokenizer`)
both need.

It sits below both, so the dependency runs one way: ``gguf`` imports the tokenizer to build
one from a file's metadata, and the tokenizer imports this module, not ``gguf``, to read that
metadata. Every name here is also importable from :mod:`coevo_jax.models.gguf`.
"""

from __future__ import annotations

import os
from typing import Any

from coevo_jax._errors import UserError

__all__ = ["GGUF_MAGIC", "GGUFError", "check_gguf", "field_value", "open_reader", "read_metadata"]

GGUF_MAGIC = b"GGUF"


class GGUFError(UserError, ValueError):
    """A file that is not a GGUF this loader can read (wrong magic, truncated, unsupported
    architecture or quantisation, missing or misshapen tensor): the user's file, not a bug."""


def check_gguf(path: str | os.PathLike) -> str:
    """``path`` as a string once it names an existing file that starts with the GGUF magic.

    Raises:
      FileNotFoundError: no such file.
      GGUFError: the file does not start with ``GGUF``.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(
            f"{path} is not a GGUF file: it starts with {magic!r}, a GGUF file starts with "
            f"{GGUF_MAGIC!r}."
        )
    return path


def open_reader(path: str):
    """A ``gguf.GGUFReader`` on ``path``; a truncated or corrupt file is a :class:`GGUFError`."""
    import gguf  # deferred: loaded when a file is read, not when the tokenizer is imported

    try:
        return gguf.GGUFReader(path, "r")
    except Exception as e:  # truncated or corrupt: the reader fails with assorted errors
        raise GGUFError(f"{path}: cannot read GGUF ({type(e).__name__}: {e})") from e


def field_value(field) -> Any:
    """One ``GGUFReader`` field decoded to a Python value (string, number or list)."""
    if hasattr(field, "contents"):
        return field.contents()
    # older gguf: decode by hand (strings are uint8 parts, arrays index into parts)
    import gguf

    def one(part, vtype):
        if vtype == gguf.GGUFValueType.STRING:
            return bytes(part).decode("utf-8")
        return part.tolist()[0]

    if field.types[0] == gguf.GGUFValueType.ARRAY:
        return [one(field.parts[i], field.types[-1]) for i in field.data]
    return one(field.parts[field.data[0]], field.types[0])


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """All key/values of a GGUF file, decoded to Python values (strings, numbers, lists)."""
    path = check_gguf(path)
    reader = open_reader(path)
    return {name: field_value(field) for name, field in reader.fields.items()}
