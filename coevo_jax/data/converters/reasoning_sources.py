"""Converters for general-reasoning sources: BBH, AGIEval, ARC-Challenge, LogicBench.

Multiple-choice items become the question followed by ``(A) ...`` option lines, with the
letter as ``true_answer``; the reasoning verifier strips parentheses and uppercases one-letter
answers, so ``(B)``, ``B`` and ``b`` all match ``B``.
"""

from __future__ import annotations

import re
from typing import Any

from coevo_jax.data.converters._util import LETTERS, ConversionError, format_choices, need, opt
from coevo_jax.data.record import Record


def convert_bbh(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """BIG-Bench Hard (``lukaemon/bbh``, one config per task; or the official
    ``bbh/<task>.json`` ``examples``): ``input``, ``target``. ``subset`` is the task name."""
    task = subset or opt(row, "task", str) or "bbh"
    target = need(row, "target", (str, int))
    return Record(
        id=f"bbh/{split}/{task}/{index}",
        source="bbh",
        split=split,
        cls="reasoning",
        problem=need(row, "input").strip(),
        true_answer=str(target).strip(),
        metadata={"task": task},
    )


_ANSWER_CUE = re.compile(
    r"\s*(?:A:\s*Among A through [A-Z], the answer is|Answer\s*:|答案\s*[:：]?)\s*$"
)
_OPTION_PREFIX = re.compile(r"^\(?([A-Z])[).:]\s*")


def convert_agieval(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """AGIEval, in either public layout:

    - the official JSONL (``ruixiangcui/AGIEval``): ``passage``, ``question``, ``options``
      (``"(A)..."`` strings), ``label`` (a letter, or a list of letters), ``answer`` (cloze);
    - the lm-eval copies (``hails/agieval-<task>``): ``query`` (already formatted),
      ``choices``, ``gold`` (list of indices).
    """
    task = subset or "agieval"
    meta = {"task": task}
    nid = f"{task}/{index}"
    if "query" in row:
        query = need(row, "query")
        gold = need(row, "gold", (list, int))
        gold = gold if isinstance(gold, list) else [gold]
        if not gold or not all(isinstance(g, int) and not isinstance(g, bool) for g in gold):
            raise ConversionError("expected a list of choice indices", field="gold")
        answer = "".join(LETTERS[g] for g in sorted(gold))
        # lm-eval's queries end in an answer cue ("A: Among A through E, the answer is",
        # "Answer:"); the class template asks for \boxed{} instead.
        problem = _ANSWER_CUE.sub("", query.strip())
        return Record(
            id=f"agieval/{split}/{nid}",
            source="agieval",
            split=split,
            cls="reasoning",
            problem=problem,
            true_answer=answer,
            metadata=meta,
        )
    question = need(row, "question")
    passage = opt(row, "passage", str, "") or ""
    body = f"{passage.strip()}\n\n{question.strip()}" if passage.strip() else question.strip()
    options = row.get("options")
    label = row.get("label")
    if options:
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise ConversionError("expected a list of strings", field="options")
        texts = [_OPTION_PREFIX.sub("", o.strip()) for o in options]
        if isinstance(label, list):
            if not label or not all(isinstance(x, str) for x in label):
                raise ConversionError("expected a letter or a list of letters", field="label")
            answer = "".join(sorted(x.strip().strip("()") for x in label))
        else:
            answer = need(row, "label").strip().strip("()")
        if not answer or any(c not in LETTERS[: len(texts)] for c in answer):
            raise ConversionError(f"{answer!r} is not one of the option letters", field="label")
        problem = format_choices(body, texts)
    else:
        answer = str(need(row, "answer", (str, int, float))).strip()
        problem = body
    return Record(
        id=f"agieval/{split}/{nid}",
        source="agieval",
        split=split,
        cls="reasoning",
        problem=problem,
        true_answer=answer,
        metadata=meta,
    )


def convert_arc(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """ARC (``allenai/ai2_arc``, config ``ARC-Challenge``): ``id``, ``question``,
    ``choices`` (``{"text": [...], "label": [...]}``), ``answerKey``. Numeric labels
    (``1``-``4``, a few items) are kept as the source gives them."""
    question = need(row, "question")
    choices = need(row, "choices", dict)
    texts = need(choices, "text", list, path="choices.text")
    labels = need(choices, "label", list, path="choices.label")
    if len(texts) != len(labels) or len(texts) < 2:
        raise ConversionError(
            "text and label lists differ in length or have < 2 items", field="choices"
        )
    key = str(need(row, "answerKey", (str, int))).strip()
    if key not in [str(lab) for lab in labels]:
        raise ConversionError(f"{key!r} is not one of the labels {labels}", field="answerKey")
    nid = opt(row, "id", str) or str(index)
    return Record(
        id=f"arc_challenge/{split}/{nid}",
        source="arc_challenge",
        split=split,
        cls="reasoning",
        problem=format_choices(question, [str(t) for t in texts], [str(lab) for lab in labels]),
        true_answer=key,
    )


def convert_logicbench(
    row: dict, *, split: str, index: int, subset: str | None = None
) -> Record | list[Record]:
    """LogicBench (``Mihir3009/LogicBench``, ``data/LogicBench(Eval)/{BQA,MCQA}/...``; each
    file's ``samples``):

    - BQA: ``id``, ``context``, ``qa_pairs`` (``[{"question", "answer": "yes"|"no"}]``), one
      record per pair, answered ``yes``/``no``;
    - MCQA: ``id``, ``context``, ``question``, ``choices`` (``{"choice_1": ...}``),
      ``answer`` (``"choice_k"``), answered with the option letter.
    """
    context = need(row, "context")
    sid = row.get("id", index)
    prefix = f"{subset}/" if subset else ""
    meta: dict[str, Any] = {"task": subset} if subset else {}
    if "qa_pairs" in row:
        pairs = need(row, "qa_pairs", list)
        out = []
        for j, qa in enumerate(pairs):
            q = need(qa, "question", path=f"qa_pairs[{j}].question")
            a = need(qa, "answer", path=f"qa_pairs[{j}].answer").strip().lower()
            if a not in ("yes", "no"):
                raise ConversionError(f"{a!r} is not yes/no", field=f"qa_pairs[{j}].answer")
            out.append(
                Record(
                    id=f"logicbench/{split}/{prefix}{sid}/{j}",
                    source="logicbench",
                    split=split,
                    cls="reasoning",
                    problem=f"{context.strip()}\n\n{q.strip()} Answer yes or no.",
                    true_answer=a,
                    metadata=meta,
                )
            )
        if not out:
            raise ConversionError("empty", field="qa_pairs")
        return out
    question = need(row, "question")
    choices = need(row, "choices", dict)
    keys = sorted(choices, key=lambda k: int(re.sub(r"\D", "", k) or 0))
    if len(keys) < 2:
        raise ConversionError("fewer than two choices", field="choices")
    answer = need(row, "answer")
    if answer not in keys:
        raise ConversionError(f"{answer!r} is not one of {keys}", field="answer")
    return Record(
        id=f"logicbench/{split}/{prefix}{sid}",
        source="logicbench",
        split=split,
        cls="reasoning",
        problem=format_choices(
            f"{context.strip()}\n\n{question.strip()}", [str(choices[k]) for k in keys]
        ),
        true_answer=LETTERS[keys.index(answer)],
        metadata=meta,
    )
