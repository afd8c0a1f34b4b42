"""Each converter on fixture rows written in its source's public format (tests/data/fixtures)."""

from pathlib import Path

import pytest

from coevo_jax.data import CONVERTERS, RecordError, load_source
from coevo_jax.data.converters import ConversionError, humaneval_asserts, last_boxed, rlvr_to_ifeval

FIX = Path(__file__).parent / "fixtures"


def load(name, *files, **kw):
    return load_source(name, files=[FIX / f for f in files], **kw)


def by_id(recs):
    return {r.id: r for r in recs}


def test_every_source_has_a_converter_and_a_fixture():
    assert set(CONVERTERS) >= {
        "math", "dapo_math", "gsm8k", "mbpp", "eurus2_code", "taco", "magpie_if", "rlvr_ifeval",
        "bbh", "ifeval", "humaneval", "agieval", "arc_challenge", "logicbench", "olympiadbench",
    }  # fmt: skip
    names = {p.name.split(".")[0].split("_")[0].split("-")[0] for p in FIX.iterdir()}
    for src in CONVERTERS:
        assert src.split("_")[0] in names, f"no fixture for {src}"


def test_math():
    recs, rep = load("math", "math.jsonl")
    assert [(r.true_answer, r.metadata["level"]) for r in recs] == [
        ("5", 1),
        ("\\frac{3}{4}", 2),
        ("3", 1),
    ]
    assert recs[0].metadata["subject"] == "Prealgebra" and recs[0].cls == "math"
    assert (
        len(rep.errors) == 1 and "math.jsonl:4:" in rep.errors[0] and "'solution'" in rep.errors[0]
    )


def test_last_boxed_takes_last_complete_balanced():
    assert last_boxed(r"\boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{x} then \boxed{unclosed") == "x"
    assert last_boxed(r"\fbox{3}") == "3" and last_boxed("none") is None


def test_dapo_math_strips_wrapper_and_dedupes():
    recs, rep = load("dapo_math", "dapo_math.jsonl")
    assert [r.problem for r in recs] == [
        "Let $a=3$. Compute $a^2+1$.",
        "How many primes are less than $10$?",
    ]
    assert [r.true_answer for r in recs] == ["10", "4"]
    assert recs[0].id == "dapo_math/train/9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"
    assert rep.duplicates == 1 and rep.rows == 3


def test_gsm8k():
    recs, rep = load("gsm8k", "gsm8k.jsonl", split="test")
    assert [r.true_answer for r in recs] == ["7", "10"]
    assert recs[0].split == "test" and recs[0].id == "gsm8k/test/0"
    assert "gsm8k.jsonl:3:" in rep.errors[0] and "'answer'" in rep.errors[0]


def test_mbpp_full_and_sanitized():
    recs = by_id(load("mbpp", "mbpp.jsonl", "mbpp_sanitized.jsonl")[0])
    a = recs["mbpp/train/901"]
    assert a.fn_name == "add_nums" and a.test_cases == {"asserts": [
        "assert add_nums(1, 2) == 3", "assert add_nums(-1, 1) == 0", "assert add_nums(10, 5) == 15"]}  # fmt: skip
    assert a.problem.endswith("Your code should pass this test:\nassert add_nums(1, 2) == 3")
    assert a.metadata["reference_solution"].startswith("def add_nums")
    b = recs["mbpp/train/902"]
    # the called function, not math.isclose; setup code prepended to each assert
    assert b.fn_name == "sqrt2" and all(
        t.startswith("import math\n") for t in b.test_cases["asserts"]
    )
    assert b.metadata["challenge_asserts"] == ["assert sqrt2(0) == 0.0"]
    assert recs["mbpp/train/903"].fn_name == "rev"


def test_humaneval_splits_check_into_asserts():
    recs = by_id(load("humaneval", "humaneval.jsonl")[0])
    r = recs["humaneval/test/900"]
    assert r.fn_name == "double"
    assert r.test_cases["asserts"] == [
        "assert double(2) == 4",
        "assert double(0) == 0",
        "assert double(-3) == -6",
    ]
    assert r.metadata["reference_solution"].endswith("return 2 * x\n")
    # a check with a loop stays whole and is called on the entry point
    (whole,) = recs["humaneval/test/901"].test_cases["asserts"]
    assert whole.rstrip().endswith("check(area)")


def test_humaneval_asserts_keeps_prelude():
    test = "import math\nMETADATA = {}\n\ndef check(candidate):\n    assert candidate(4) == math.sqrt(16)\n"
    assert humaneval_asserts(test, "f") == ["import math\nassert f(4) == math.sqrt(16)"]
    with pytest.raises(ConversionError, match="check"):
        humaneval_asserts("def other(c):\n    pass\n", "f")


def test_eurus2_code_stdio_call_and_filtered_math():
    recs, rep = load("eurus2_code", "eurus2_code.jsonl")
    a, b = recs
    assert a.problem == "Read an integer n and print n squared." and a.fn_name is None
    assert a.test_cases == {"inputs": ["3\n", "5\n"], "outputs": ["9\n", "25\n"]}
    assert b.fn_name == "inc" and b.test_cases == {"inputs": [[1], [5]], "outputs": [2, 6]}
    assert a.metadata["origin"] == "taco" and rep.filtered == 1


def test_taco():
    recs, rep = load("taco", "taco.jsonl")
    a, b = recs
    assert a.test_cases["inputs"] == ["1 2\n", "5 7\n"] and a.fn_name is None
    assert a.metadata["reference_solution"].startswith("a, b = map")
    assert b.fn_name == "maxOf" and "class Solution" in b.problem
    assert "taco.jsonl:3:" in rep.errors[0] and "2 inputs but 1 outputs" in rep.errors[0]


def test_ifeval_drops_null_kwargs():
    recs = load("ifeval", "ifeval.jsonl", split="train")[0]
    assert recs[0].kwargs == ({},)
    assert recs[1].instruction_id_list == (
        "detectable_format:number_bullet_lists",
        "startend:end_checker",
    )
    assert recs[1].kwargs == (
        {"num_bullets": 3},
        {"end_phrase": "Is there anything else I can help with?"},
    )
    assert recs[1].metadata["registry"] == "ifeval"


def test_ifbench_marks_its_registry():
    (r,) = load("ifbench", "ifbench.jsonl")[0]
    assert r.metadata["registry"] == "ifbench" and r.kwargs == ({"keyword1": "leaf"},)


def test_magpie_if_parses_kwargs_string():
    recs = load("magpie_if", "magpie_if.jsonl")[0]
    assert recs[0].kwargs == ({"relation": "less than", "num_words": 40}, {})
    assert recs[1].instruction_id_list == ("detectable_format:number_highlighted_sections",)


def test_rlvr_ifeval_maps_to_ifeval_registry():
    recs, rep = load("rlvr_ifeval", "rlvr_ifeval.jsonl")
    low, words, freq = recs
    assert low.instruction_id_list == ("change_case:english_lowercase",) and low.kwargs == ({},)
    assert words.kwargs == ({"num_words": 51, "relation": "less than"},)
    assert "less than N+1" in words.metadata["if_note"]
    assert freq.kwargs == ({"keyword": "bark", "frequency": 3, "relation": "at least"},)
    assert "rlvr_ifeval.jsonl:4:" in rep.errors[0] and "around" in rep.errors[0]


def test_rlvr_mapping_covers_open_instruct_functions():
    iid, kw, _ = rlvr_to_ifeval(
        {"func_name": "validate_sections", "N": 3, "section_splitter": "Section"}
    )
    assert iid == "detectable_format:multiple_sections" and kw == {
        "num_sections": 3,
        "section_spliter": "Section",
    }
    with pytest.raises(ConversionError, match="unknown func_name"):
        rlvr_to_ifeval({"func_name": "validate_vibes"})


def test_bbh_json_and_jsonl_tasks():
    recs = load("bbh", "bbh")[0]
    assert [(r.metadata["task"], r.true_answer) for r in recs] == [
        ("boolean_expressions", "False"), ("boolean_expressions", "True"), ("date_understanding", "(A)")]  # fmt: skip
    assert all(r.cls == "reasoning" for r in recs)


def test_agieval_both_layouts():
    recs = load("agieval", "agieval_lsat-ar.jsonl", "agieval_math.jsonl", "agieval-sat-math.jsonl")[
        0
    ]
    assert [r.true_answer for r in recs] == ["C", "AC", "12", "B"]
    assert recs[0].problem.endswith("(C) Cy\n(D) Dee\n(E) Eve") and recs[0].problem.startswith(
        "Five people"
    )
    assert not recs[3].problem.endswith("the answer is")


def test_arc_challenge():
    recs, rep = load("arc_challenge", "arc_challenge.jsonl")
    assert [r.true_answer for r in recs] == ["B", "2"]
    assert "(B) carbon dioxide" in recs[0].problem and "(2) water" in recs[1].problem
    assert "'answerKey'" in rep.errors[0]


def test_logicbench_bqa_and_mcqa():
    recs = load("logicbench", "logicbench")[0]
    assert [r.true_answer for r in recs] == ["yes", "no", "B"]
    assert len({r.id for r in recs}) == 3 and "BQA/propositional_logic/modus_tollens" in recs[0].id


def test_olympiadbench_text_only_with_unit():
    recs, rep = load("olympiadbench", "olympiadbench.jsonl")
    assert [r.true_answer for r in recs] == ["6", "20"]
    assert recs[1].problem.endswith("Give the answer in m.") and rep.filtered == 1


def test_missing_field_and_wrong_type_are_named():
    with pytest.raises(ConversionError) as ei:
        CONVERTERS["gsm8k"]({"answer": "#### 1"}, split="train", index=0)
    assert ei.value.field == "question" and "missing" in str(ei.value)
    with pytest.raises(ConversionError) as ei:
        CONVERTERS["humaneval"]({"task_id": "H/1", "prompt": 3}, split="test", index=0)
    assert ei.value.field == "prompt" and "expected str, got int" in str(ei.value)


def test_on_error_raise_names_file_and_line():
    with pytest.raises(RecordError) as ei:
        load("gsm8k", "gsm8k.jsonl", on_error="raise")
    assert ei.value.line == 3 and ei.value.path.endswith("gsm8k.jsonl")


def test_hub_path_uses_datasets_and_locates_rows(monkeypatch):
    """Online loading goes through ``datasets.load_dataset`` per (path, config) of the spec."""
    import types

    calls = []

    def load_dataset(path, config, split):
        calls.append((path, config, split))
        return [{"question": f"{config} q", "answer": "#### 1"}, {"question": "bad"}]

    monkeypatch.setitem(
        __import__("sys").modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset)
    )
    recs, rep = load_source("gsm8k", split="test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [r.problem for r in recs] == ["main q"] and recs[0].split == "test"
    assert rep.errors == ["hf://openai/gsm8k[main]:test:2: gsm8k: field 'answer': missing"]


def test_hub_failure_says_to_use_local_files(monkeypatch):
    import types

    def load_dataset(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.setitem(
        __import__("sys").modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset)
    )
    with pytest.raises(RuntimeError, match="--local gsm8k=PATH"):
        load_source("gsm8k")
