"""Record schema: validation names the field; JSON round trip uses the key "class"."""

import json

import pytest

from coevo_jax.data import Record, RecordError


def _math(**kw):
    base = dict(
        id="m/1", source="gsm8k", split="train", cls="math", problem="1+1?", true_answer="2"
    )
    base.update(kw)
    return Record(**base)


def test_round_trip_uses_class_key_and_drops_empty_fields():
    r = _math()
    d = json.loads(r.to_json())
    assert d == {
        "id": "m/1",
        "source": "gsm8k",
        "split": "train",
        "class": "math",
        "problem": "1+1?",
        "true_answer": "2",
    }
    assert Record.from_dict(d) == r
    assert r["class"] == "math" and r.get("class") == "math" and r.get("fn_name", "x") == "x"


def test_if_record_lists_become_tuples_and_round_trip():
    r = Record(
        id="i/1",
        source="ifeval",
        split="test",
        cls="if",
        problem="Write.",
        instruction_id_list=["punctuation:no_comma"],
        kwargs=[{}],
    )
    assert r.instruction_id_list == ("punctuation:no_comma",)
    assert Record.from_dict(json.loads(r.to_json())) == r


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(cls="algebra"), "class"),
        (dict(problem="  "), "problem"),
        (dict(true_answer=None), "true_answer"),
        (dict(true_answer=2), "true_answer"),
        (dict(id=""), "id"),
        (dict(metadata={"x": object()}), "metadata"),
        (dict(fn_name="not an identifier"), "fn_name"),
    ],
)
def test_invalid_fields_are_named(kw, field):
    with pytest.raises(RecordError) as ei:
        _math(**kw)
    assert ei.value.field == field
    assert repr(field) in str(ei.value)


@pytest.mark.parametrize(
    "tc, fn_name, msg",
    [
        (None, None, "missing"),
        ({"inputs": ["1"], "outputs": []}, None, "1 inputs but 0 outputs"),
        ({"inputs": [], "outputs": []}, None, "no test cases"),
        ({"inputs": [[1]], "outputs": [2]}, None, "give fn_name"),
        ({"asserts": []}, "f", "non-empty list"),
        ({"asserts": ["assert f()"], "extra": 1}, "f", "unknown key"),
        ({"setup": "x = 1"}, "f", "needs 'inputs'"),
    ],
)
def test_code_test_cases_rules(tc, fn_name, msg):
    with pytest.raises(RecordError, match=msg) as ei:
        Record(
            id="c/1",
            source="taco",
            split="train",
            cls="code",
            problem="p",
            test_cases=tc,
            fn_name=fn_name,
        )
    assert ei.value.field == "test_cases"


def test_code_forms_accepted():
    for tc, fn in [
        ({"inputs": ["1\n"], "outputs": ["2\n"]}, None),
        ({"inputs": [["1", "2"]], "outputs": [["3"]]}, None),  # stdin as a list of lines
        ({"inputs": [[1, 2]], "outputs": [3]}, "add"),
        ({"asserts": ["assert add(1, 2) == 3"], "setup": "import math"}, "add"),
    ]:
        r = Record(
            id="c/1", source="x", split="train", cls="code", problem="p", test_cases=tc, fn_name=fn
        )
        assert r.fn_name == fn
        assert Record.from_dict(json.loads(r.to_json())) == r  # accepted forms survive the JSONL


def test_if_kwargs_must_match_ids():
    with pytest.raises(RecordError, match="1 kwargs for 2 instruction ids") as ei:
        Record(
            id="i/1", source="ifeval", split="test", cls="if", problem="p",
            instruction_id_list=["a:b", "c:d"], kwargs=[{}],
        )  # fmt: skip
    assert ei.value.field == "kwargs"


def test_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(RecordError, match="unknown key") as ei:
        Record.from_dict({**_math().to_dict(), "answer": "2"})
    assert ei.value.field == "answer"
    d = _math().to_dict()
    del d["problem"]
    with pytest.raises(RecordError, match="missing") as ei:
        Record.from_dict(d)
    assert ei.value.field == "problem"


def test_records_are_frozen():
    r = _math()
    with pytest.raises(AttributeError):
        r.problem = "changed"
