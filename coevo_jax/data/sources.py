"""Where each source lives and how to load it: HF ``datasets`` online, local files offline.

:data:`SOURCES` names each source's HF dataset(s), its class and which split is for training
and which for testing. A source without a test split (DAPO-MATH-17k, MAGPIE-IF,
RLVR-IFEval, BBH) is split into train and held-out by id hash (see
:func:`coevo_jax.data.mixtures.is_heldout`).

:func:`load_source` converts every row, drops exact duplicate problems (DAPO-MATH-17k ships
each problem many times), and returns the records with a :class:`LoadReport` counting what
was read, filtered, deduplicated and rejected (each rejection with its ``file:line``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from coevo_jax._errors import UserError
from coevo_jax.data.converters import CONVERTERS, ConversionError
from coevo_jax.data.jsonl import iter_rows
from coevo_jax.data.record import Record, RecordError

log = logging.getLogger("coevo_jax.data")

BBH_TASKS = (
    "boolean_expressions", "causal_judgement", "date_understanding", "disambiguation_qa",
    "dyck_languages", "formal_fallacies", "geometric_shapes", "hyperbaton",
    "logical_deduction_five_objects", "logical_deduction_seven_objects",
    "logical_deduction_three_objects", "movie_recommendation", "multistep_arithmetic_two",
    "navigate", "object_counting", "penguins_in_a_table", "reasoning_about_colored_objects",
    "ruin_names", "salient_translation_error_detection", "snarks", "sports_understanding",
    "temporal_sequences", "tracking_shuffled_objects_five_objects",
    "tracking_shuffled_objects_seven_objects", "tracking_shuffled_objects_three_objects",
    "web_of_lies", "word_sorting",
)  # fmt: skip
MATH_SUBJECTS = (
    "algebra", "counting_and_probability", "geometry", "intermediate_algebra",
    "number_theory", "prealgebra", "precalculus",
)  # fmt: skip
AGIEVAL_EN = (
    "aqua-rat", "logiqa-en", "lsat-ar", "lsat-lr", "lsat-rc", "sat-en", "sat-math",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One public source.

    ``hf`` lists ``(dataset path, config or None, subset name or None)``; a source spread
    over several configs or repos (MATH subjects, BBH tasks) lists each. ``train_split`` /
    ``test_split`` are HF split names; ``None`` for ``train_split`` marks an evaluation-only
    benchmark, ``None`` for ``test_split`` a source whose held-out part is cut by id hash.
    """

    name: str
    cls: str
    hf: tuple[tuple[str, str | None, str | None], ...]
    train_split: str | None
    test_split: str | None
    note: str = ""
    subsets_from_files: bool = False  # local files name the subset (BBH task, AGIEval exam)


def _one(path: str, config: str | None = None) -> tuple[tuple[str, str | None, str | None], ...]:
    return ((path, config, None),)


SOURCES: dict[str, SourceSpec] = {
    s.name: s
    for s in (
        SourceSpec("math", "math", tuple(("EleutherAI/hendrycks_math", c, c) for c in MATH_SUBJECTS), "train", "test"),
        SourceSpec("dapo_math", "math", _one("BytedTsinghua-SIA/DAPO-Math-17k"), "train", None,
                   "many duplicate rows; deduplicated by problem text"),
        SourceSpec("gsm8k", "math", _one("openai/gsm8k", "main"), "train", "test"),
        SourceSpec("mbpp", "code", _one("google-research-datasets/mbpp", "full"), "train", "test"),
        SourceSpec("eurus2_code", "code", _one("PRIME-RL/Eurus-2-RL-Data"), "train", "validation",
                   "math rows are filtered out"),
        SourceSpec("taco", "code", _one("BAAI/TACO"), "train", "test",
                   "the hub repo uses a loading script; offline users point at its JSON/parquet files"),
        SourceSpec("magpie_if", "if", _one("argilla/ifeval-like-data", "filtered"), "train", None),
        SourceSpec("rlvr_ifeval", "if", _one("allenai/RLVR-IFeval"), "train", None),
        SourceSpec("bbh", "reasoning", tuple(("lukaemon/bbh", t, t) for t in BBH_TASKS), "test", None,
                   "BBH has one split; train and held-out are cut by id hash", True),
        SourceSpec("ifeval", "if", _one("google/IFEval"), None, "train"),
        SourceSpec("humaneval", "code", _one("openai/openai_humaneval"), None, "test"),
        SourceSpec("agieval", "reasoning", tuple((f"hails/agieval-{t}", None, t) for t in AGIEVAL_EN), None, "test",
                   "English exams; one local file per exam", True),
        SourceSpec("arc_challenge", "reasoning", _one("allenai/ai2_arc", "ARC-Challenge"), "train", "test"),
        SourceSpec("logicbench", "reasoning", (), None, "test",
                   "no canonical HF copy; point at the LogicBench(Eval) folder", True),
        SourceSpec("olympiadbench", "math",
                   (("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "maths"),
                    ("Hothan/OlympiadBench", "OE_TO_physics_en_COMP", "physics")), None, "train",
                   "text-only English open-ended subsets; items with images are filtered out"),
        SourceSpec("ifbench", "if", _one("allenai/IFBench_test"), None, "train",
                   "IFBench's own instruction registry (metadata.registry = 'ifbench')"),
    )
}  # fmt: skip


@dataclasses.dataclass
class LoadReport:
    """What loading one source did. ``errors`` holds ``file:line: ...`` messages."""

    source: str
    rows: int = 0
    records: int = 0
    filtered: int = 0
    duplicates: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["n_errors"] = len(self.errors)
        d["errors"] = self.errors[:20]  # the manifest keeps a sample; the log has them all
        return d


_GENERIC_STEMS = {"data", "data_instances", "train", "test", "validation", "dev", "input_data"}


def subset_from_path(path: Path, root: Path | None = None) -> str:
    """The subset a local file holds: its path below ``root`` without suffixes, generic file
    names dropped (``bbh/navigate.json`` -> ``navigate``;
    ``LogicBench(Eval)/BQA/propositional_logic/modus_tollens/data_instances.json`` ->
    ``BQA/propositional_logic/modus_tollens``)."""
    rel = (
        path.relative_to(root)
        if root is not None and path.is_relative_to(root)
        else Path(path.name)
    )
    parts = list(rel.parts)
    parts[-1] = parts[-1].split(".")[0]
    if len(parts) > 1 and parts[-1].lower() in _GENERIC_STEMS:
        parts.pop()
    if len(parts) == 1 and parts[0].lower() in _GENERIC_STEMS:
        parts = [path.parent.name]
    return "/".join(parts)


class SourceUnavailableError(UserError, RuntimeError):
    """A source cannot be read from the hub here (no ``datasets`` package, no network, no hub
    copy); the message names the ``--local`` files to pass instead."""


def _local_rows(
    files: Sequence[str | os.PathLike],
    on_error: Literal["raise", "skip"],
    errors: list[RecordError],
    with_subsets: bool,
) -> Iterator[tuple[str, int, dict, str | None]]:
    for f in files:
        p = Path(f)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file")
        paths = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for q in paths:
            sub = subset_from_path(q, p if p.is_dir() else None) if with_subsets else None
            for loc, line, row in iter_rows(q, on_error=on_error, errors=errors):
                yield loc, line, row, sub


def _hf_rows(spec: SourceSpec, split: str) -> Iterator[tuple[str, int, dict, str | None]]:
    try:
        import datasets  # lazy: only online users need it
    except ImportError as e:
        raise SourceUnavailableError(
            f"loading {spec.name!r} from the hub needs `pip install datasets`; "
            f"offline, pass local files (coevo data build --local {spec.name}=PATH)"
        ) from e
    if not spec.hf:
        raise SourceUnavailableError(
            f"source {spec.name!r} has no hub copy; pass local files ({spec.note})"
        )
    for path, config, subset in spec.hf:
        try:
            ds = datasets.load_dataset(path, config, split=split)
        except Exception as e:  # network, auth, missing config: all mean "use local files"
            raise SourceUnavailableError(
                f"could not load {path}" + (f"[{config}]" if config else "") + f":{split} from "
                f"the HF hub ({type(e).__name__}: {e}); offline, pass local files "
                f"(coevo data build --local {spec.name}=PATH)"
            ) from e
        where = f"hf://{path}" + (f"[{config}]" if config else "") + f":{split}"
        for i, row in enumerate(ds, start=1):
            yield where, i, row, subset


def convert_rows(
    name: str,
    rows: Iterator[tuple[str, int, dict, str | None]],
    *,
    split: str,
    on_error: Literal["raise", "skip"] = "skip",
    report: LoadReport | None = None,
    converter: Callable[..., Any] | None = None,
    dedupe: bool = True,
) -> list[Record]:
    """Convert located rows with ``converter`` (default: source ``name``'s); with ``dedupe``,
    a record whose problem text was already seen is dropped and counted."""
    convert = converter or CONVERTERS[name]
    report = report or LoadReport(name)
    out: list[Record] = []
    seen: set[str] = set()
    for index, (loc, line, row, subset) in enumerate(rows):
        report.rows += 1
        try:
            got = convert(row, split=split, index=index, subset=subset)
        except (ConversionError, RecordError) as e:
            msg = f"{loc}:{line}: {name}: {e}"
            if on_error == "raise":
                raise RecordError(f"{name}: {e}", path=loc, line=line) from e
            log.warning("skipped: %s", msg)
            report.errors.append(msg)
            continue
        recs = got if isinstance(got, list) else [got]
        if not recs:
            report.filtered += 1
        for r in recs:
            if dedupe and r.problem in seen:
                report.duplicates += 1
                continue
            seen.add(r.problem)
            out.append(r)
    ids = [r.id for r in out]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise RecordError(f"{name}: two different records share id {dup!r}")
    report.records = len(out)
    return out


def load_source(
    name: str,
    *,
    split: str | None = None,
    files: Sequence[str | os.PathLike] | None = None,
    on_error: Literal["raise", "skip"] = "skip",
) -> tuple[list[Record], LoadReport]:
    """Load and convert one source.

    ``files``: local files or folders in the source's public format (JSONL, JSON, parquet);
    without them the rows come from the HF hub through ``datasets``. ``split`` is the HF
    split name (default: the spec's train split, else its test split); it is also written
    into each record's ``split``.
    """
    if name not in SOURCES:
        raise KeyError(f"unknown source {name!r}; known: {sorted(SOURCES)}")
    spec = SOURCES[name]
    split = split or spec.train_split or spec.test_split
    assert split is not None
    report = LoadReport(name)
    read_errors: list[RecordError] = []
    rows = (
        _local_rows(files, on_error, read_errors, spec.subsets_from_files)
        if files
        else _hf_rows(spec, split)
    )
    recs = convert_rows(name, rows, split=split, on_error=on_error, report=report)
    report.errors.extend(str(e) for e in read_errors)
    return recs, report
