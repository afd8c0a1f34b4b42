"""Reading and writing records and raw source rows, with errors located at ``file:line``.

Two readers:

- :func:`iter_records` / :func:`read_records`: our own JSONL of :class:`Record` lines.
- :func:`iter_rows`: a source's raw rows (``.jsonl``, ``.jsonl.gz``, ``.json`` holding a list
  or an object with a list under ``examples``/``samples``/``data``, ``.parquet``), each
  paired with its location so a converter's complaint can name the line.

A bad line is either fatal (``on_error="raise"``, the default) or reported and skipped
(``on_error="skip"``): the error goes to the ``errors`` list the caller passes and to the
``coevo_jax.data`` logger. Nothing is repaired. A gzip file cut off mid-stream is reported
at the first line that could not be read.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from coevo_jax.data.record import Record, RecordError

log = logging.getLogger("coevo_jax.data")

OnError = Literal["raise", "skip"]


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, str | RecordError]]:
    """(line number, text) for each line; a read failure yields an error and stops."""
    lineno = 0
    with _open_text(path) as fh:
        while True:
            try:
                text = fh.readline()
            except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
                yield (
                    lineno + 1,
                    RecordError(
                        f"unreadable ({type(e).__name__}: {e}); the file is truncated or corrupt",
                        path=str(path),
                        line=lineno + 1,
                    ),
                )
                return
            if not text:
                return
            lineno += 1
            yield lineno, text


def _handle(err: RecordError, on_error: OnError, errors: list[RecordError] | None) -> None:
    if on_error == "raise":
        raise err
    if on_error != "skip":
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    log.warning("skipped: %s", err)
    if errors is not None:
        errors.append(err)


def iter_json_lines(
    path: str | os.PathLike,
    *,
    on_error: OnError = "raise",
    errors: list[RecordError] | None = None,
) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON value) for each non-blank line of a JSONL(.gz) file."""
    p = Path(path)
    for lineno, text in _lines(p):
        if isinstance(text, RecordError):
            _handle(text, on_error, errors)
            return
        if not text.strip():
            continue
        try:
            yield lineno, json.loads(text)
        except json.JSONDecodeError as e:
            _handle(RecordError(f"invalid JSON: {e}", path=str(p), line=lineno), on_error, errors)


def iter_records(
    path: str | os.PathLike,
    *,
    on_error: OnError = "raise",
    errors: list[RecordError] | None = None,
) -> Iterator[Record]:
    """Validated records from a JSONL(.gz) file of :meth:`Record.to_json` lines."""
    for lineno, obj in iter_json_lines(path, on_error=on_error, errors=errors):
        try:
            yield Record.from_dict(obj)
        except RecordError as e:
            _handle(e.at(str(path), lineno), on_error, errors)
        except TypeError as e:  # wrong keyword set reaching the dataclass
            _handle(RecordError(str(e), path=str(path), line=lineno), on_error, errors)


def read_records(
    path: str | os.PathLike,
    *,
    on_error: OnError = "raise",
    errors: list[RecordError] | None = None,
) -> list[Record]:
    return list(iter_records(path, on_error=on_error, errors=errors))


def dumps_records(records: Iterable[Record]) -> bytes:
    """The exact bytes :func:`write_records` writes (one canonical JSON line per record)."""
    return "".join(r.to_json() + "\n" for r in records).encode("utf-8")


def write_records(path: str | os.PathLike, records: Iterable[Record]) -> bytes:
    """Write records as JSONL atomically (temp file + rename); return the bytes written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = dumps_records(records)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)
    return data


# ----------------------------------------------------------------------------- raw rows


def iter_rows(
    path: str | os.PathLike,
    *,
    on_error: OnError = "raise",
    errors: list[RecordError] | None = None,
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(path, line or row number, row dict) for each row of a source file.

    Line numbers are 1-based file lines for JSONL, 1-based item positions for JSON lists
    and parquet tables. A row that is not a JSON object is an error.
    """
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        for lineno, obj in iter_json_lines(p, on_error=on_error, errors=errors):
            if isinstance(obj, dict):
                yield str(p), lineno, obj
            else:
                _handle(
                    RecordError(
                        f"expected a JSON object, got {type(obj).__name__}",
                        path=str(p),
                        line=lineno,
                    ),
                    on_error,
                    errors,
                )
    elif name.endswith((".json", ".json.gz")):
        with _open_text(p) as fh:
            try:
                data = json.load(fh)
            except (json.JSONDecodeError, EOFError, OSError, zlib.error) as e:
                _handle(RecordError(f"invalid JSON file: {e}", path=str(p)), on_error, errors)
                return
        items = data
        if isinstance(data, dict):
            for key in ("examples", "samples", "data", "rows"):
                if isinstance(data.get(key), list):
                    items = data[key]
                    break
            else:
                _handle(
                    RecordError(
                        "a JSON object without an 'examples'/'samples'/'data' list", path=str(p)
                    ),
                    on_error,
                    errors,
                )
                return
        for i, obj in enumerate(items, start=1):
            if isinstance(obj, dict):
                yield str(p), i, obj
            else:
                _handle(
                    RecordError(
                        f"item is {type(obj).__name__}, not an object", path=str(p), line=i
                    ),
                    on_error,
                    errors,
                )
    elif name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq  # lazy: only parquet users need pyarrow
        except ImportError as e:
            raise ImportError(f"reading {p} needs pyarrow (pip install pyarrow)") from e
        for i, obj in enumerate(pq.read_table(p).to_pylist(), start=1):
            yield str(p), i, obj
    else:
        raise ValueError(f"{p}: unsupported file type (use .jsonl, .jsonl.gz, .json or .parquet)")
