"""EvoChamber's task streams (the EvoChamber paper, "Datasets"), built from unified records.

A stream is a list of dicts in the project's unified record form (``id``, ``class``,
``problem``, ``true_answer`` | ``test_cases`` + ``fn_name``, ...) plus ``niche``:

- ``hard_math``: MATH level 4/5 (niche ``math_hard``; level read from ``metadata.level`` or
  ``level``), then AIME by year when supplied (niche ``aime_<year>``, year from
  ``metadata.year``/``year`` or the first 4-digit number in the id), years ascending.
- ``hard_code``: MBPP (niche ``mbpp``), then CodeContests when supplied (``codecontests``).
- ``aflow``: sequential domain blocks GSM8K -> HotpotQA -> MBPP -> MATH -> HumanEval -> DROP,
  each absent source skipped (HotpotQA, DROP and AIME are not available offline), niche =
  the source name.

Sources are read from a directory of JSONL files named after the source (``math.jsonl``,
``gsm8k.jsonl``, ``mbpp.jsonl``, ``humaneval.jsonl``, ``aime.jsonl``, ``codecontests.jsonl``,
``hotpotqa.jsonl``, ``drop.jsonl``; ``.jsonl.gz`` too); a source without a file comes from
``coevo_jax.data.offline`` when it has a builder (GSM8K, MATH, MBPP, HumanEval).
Subsampling is deterministic from ``seed``; ``limit`` scales every block by the same factor
so a short run still visits every niche.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coevo_jax.data.offline import OFFLINE_BUILDERS, build_offline

SEED_SIZES = {
    "hard_math": {"math_hard": 262, "aime": 30},  # AIME: per year
    "hard_code": {"mbpp": 257, "codecontests": 165},
    "aflow": 100,  # per domain block
}
AFLOW_ORDER = ("gsm8k", "hotpotqa", "mbpp", "math", "humaneval", "drop")
STREAMS = ("hard_math", "hard_code", "aflow")


def _as_dict(record: Any) -> dict[str, Any]:
    if isinstance(record, Mapping):
        return dict(record)
    if hasattr(record, "to_dict"):
        return dict(record.to_dict())
    raise TypeError(
        f"a stream record must be a mapping or have to_dict(), got {type(record).__name__}"
    )


def with_niche(record: Any, niche: str) -> dict[str, Any]:
    d = _as_dict(record)
    d["niche"] = niche
    return d


def _meta(d: Mapping[str, Any], key: str) -> Any:
    meta = d.get("metadata") or {}
    return meta.get(key, d.get(key))


def _sample(records: Sequence[dict], n: int | None, seed: int, tag: str) -> list[dict]:
    records = sorted(records, key=lambda r: str(r["id"]))
    if n is None or n >= len(records):
        return list(records)
    rng = random.Random(f"{seed}:{tag}")
    idx = sorted(rng.sample(range(len(records)), n))
    return [records[i] for i in idx]


def _level(d: Mapping[str, Any]) -> int | None:
    lv = _meta(d, "level")
    if isinstance(lv, str):
        m = re.search(r"\d+", lv)
        return int(m.group()) if m else None
    return lv if isinstance(lv, int) else None


def _year(d: Mapping[str, Any]) -> str:
    y = _meta(d, "year")
    if y is not None:
        return str(y)
    m = re.search(r"(19|20)\d{2}", str(d["id"]))
    return m.group(0) if m else "unknown"


def hard_math(
    math: Sequence[Any],
    aime: Sequence[Any] = (),
    *,
    n_math: int | None = 262,
    n_aime_per_year: int | None = 30,
    seed: int = 0,
) -> list[dict]:
    hard = [_as_dict(r) for r in math if _level(_as_dict(r)) in (4, 5)]
    out = [with_niche(r, "math_hard") for r in _sample(hard, n_math, seed, "math_hard")]
    by_year: dict[str, list[dict]] = {}
    for r in aime:
        d = _as_dict(r)
        by_year.setdefault(_year(d), []).append(d)
    for y in sorted(by_year):
        out += [
            with_niche(r, f"aime_{y}")
            for r in _sample(by_year[y], n_aime_per_year, seed, f"aime_{y}")
        ]
    return out


def hard_code(
    mbpp: Sequence[Any],
    codecontests: Sequence[Any] = (),
    *,
    n_mbpp: int | None = 257,
    n_cc: int | None = 165,
    seed: int = 0,
) -> list[dict]:
    out = [
        with_niche(r, "mbpp") for r in _sample([_as_dict(r) for r in mbpp], n_mbpp, seed, "mbpp")
    ]
    out += [
        with_niche(r, "codecontests")
        for r in _sample([_as_dict(r) for r in codecontests], n_cc, seed, "cc")
    ]
    return out


def aflow(
    sources: Mapping[str, Sequence[Any]], *, block: int | None = 100, seed: int = 0
) -> list[dict]:
    out = []
    for name in AFLOW_ORDER:
        recs = sources.get(name) or ()
        out += [
            with_niche(r, name) for r in _sample([_as_dict(r) for r in recs], block, seed, name)
        ]
    return out


def limit_blocks(stream: Sequence[dict], limit: int | None) -> list[dict]:
    """Keeps about ``limit`` tasks, shrinking each niche's block by the same factor (at least
    one task per niche), in stream order."""
    if limit is None or limit >= len(stream):
        return list(stream)
    counts: dict[str, int] = {}
    for r in stream:
        counts[r["niche"]] = counts.get(r["niche"], 0) + 1
    keep = {z: max(1, math.floor(c * limit / len(stream))) for z, c in counts.items()}
    spare = limit - sum(keep.values())
    for z in sorted(counts, key=lambda z: -counts[z]):
        if spare <= 0:
            break
        if keep[z] < counts[z]:
            keep[z] += 1
            spare -= 1
    taken: dict[str, int] = {}
    out = []
    for r in stream:
        z = r["niche"]
        if taken.get(z, 0) < keep[z]:
            out.append(r)
            taken[z] = taken.get(z, 0) + 1
    return out[:limit]


def offline_source(name: str) -> list[dict]:
    """``coevo_jax.data.offline.build_offline(name)`` as dicts; [] when no builder exists."""
    if name not in OFFLINE_BUILDERS:
        return []
    records, _ = build_offline(name)
    return [r.to_dict() for r in records]


def check_data_dir(data_dir: str | Path | None) -> None:
    """Raises unless ``data_dir`` is None or an existing directory: a mistyped ``--data``
    must stop the run, not let every source fall back to the offline builders unnoticed."""
    if data_dir is None:
        return
    path = Path(data_dir)
    if not path.exists():
        raise FileNotFoundError(f"data directory not found: {path}")
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: not a directory (--data wants a directory of JSONL)")


def read_source(data_dir: str | Path | None, name: str) -> list[dict]:
    """``<data_dir>/<name>.jsonl[.gz]`` as dicts; without that file, the offline builder of
    the same name (packages shipped with the project); [] when neither exists. A bad line is
    an error naming file and line."""
    base = Path(data_dir) if data_dir is not None else None
    for path in (base / f"{name}.jsonl", base / f"{name}.jsonl.gz") if base is not None else ():
        if path.is_file():
            opener = gzip.open if path.suffix == ".gz" else open
            out = []
            with opener(path, "rt", encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            out.append(json.loads(line))
                        except json.JSONDecodeError as e:
                            raise ValueError(f"{path}:{n}: not a JSON record ({e})") from e
            return out
    return offline_source(name)


def shuffle_stream(stream: Sequence[dict], seed: int) -> list[dict]:
    """The stream in a random order (``random.Random(seed)``), the EvoChamber paper's
    permuted-stream robustness check: the same tasks, no curriculum."""
    out = list(stream)
    random.Random(seed).shuffle(out)
    return out


def build_stream(
    name: str, data_dir: str | Path, *, limit: int | None = None, seed: int = 0
) -> list[dict]:
    """One of :data:`STREAMS` from the JSONL sources in ``data_dir`` (None: the offline
    builders only).

    Raises:
      FileNotFoundError, NotADirectoryError: ``data_dir`` is given but is not a directory;
        without this check every source would silently come from the offline builders.
    """
    check_data_dir(data_dir)
    if name == "hard_math":
        stream = hard_math(read_source(data_dir, "math"), read_source(data_dir, "aime"), seed=seed)
    elif name == "hard_code":
        stream = hard_code(
            read_source(data_dir, "mbpp"), read_source(data_dir, "codecontests"), seed=seed
        )
    elif name == "aflow":
        stream = aflow({s: read_source(data_dir, s) for s in AFLOW_ORDER}, seed=seed)
    else:
        raise ValueError(f"unknown stream {name!r}; known: {', '.join(STREAMS)}")
    if not stream:
        raise FileNotFoundError(
            f"stream {name!r}: no source records found in {data_dir} (expected e.g. "
            f"{', '.join(f'{s}.jsonl' for s in (AFLOW_ORDER if name == 'aflow' else ('math', 'mbpp')))})"
        )
    return limit_blocks(stream, limit)
