import pytest

from coevo_jax.orchestrators.flyroute.gate import (
    JUDGE_TAG,
    GateItem,
    JudgeGate,
    VerifierGate,
    judge_prompt,
    parse_score,
    verifier_from_records,
)
from coevo_jax.orchestrators.flyroute.query import Query

from .flyroute_fakes import ScriptedLLM


@pytest.mark.parametrize(
    "text,want",
    [
        ("Score: 0.8", 0.8),
        ("score:1", 1.0),
        ("**Score:** 0.75", 0.75),
        ("The answer is right. Score = 0.9", 0.9),
        ("Rating: 7/10", 0.7),
        ("Score: 8 out of 10", 0.8),
        ("score of 85%", 0.85),
        ("Score: .5", 0.5),
        ("0.95", 0.95),
        ("  1  ", 1.0),
        ("9/10", 0.9),
        ("90%", 0.9),
        ("Score: 0.2\nOn reflection, Score: 0.9", 0.9),  # last labelled score wins
        ("Score: 0", 0.0),
    ],
)
def test_parse_score_accepts(text, want):
    assert parse_score(text) == pytest.approx(want)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "great answer!",
        "Score: 7",
        "Score: 1.5",
        "7",
        "Score: 11/10",
        "Score: 3/0",
        "I'd give it 0.8 or so",
        None,
    ],
)
def test_parse_score_rejects(text):
    assert parse_score(text) is None


def _items(*responses):
    return [GateItem(Query(f"q{i}", "integral of x"), "math", r) for i, r in enumerate(responses)]


def test_judge_gate_threshold_and_unparseable_counted():
    replies = iter(["Score: 0.7", "Score: 0.69", "no idea", "Score: 1"])
    llm = ScriptedLLM(judge=lambda q, r: next(replies))
    gate = JudgeGate(llm, theta=0.7)
    res = gate(_items("a", "b", "c", "d"), step=3)
    assert [r.passed for r in res] == [True, False, False, True]  # s >= theta passes
    assert [r.parsed for r in res] == [True, True, False, True]
    assert res[2].score == 0.0 and res[2].raw == "no idea"
    assert gate.stats == {"judged": 4, "unparseable": 1, "passed": 2}
    reqs = llm.by_tag(JUDGE_TAG)
    assert len(reqs) == 4 and all(r.temperature == 0.0 and r.agent == -1 for r in reqs)
    assert "integral of x" in reqs[0].prompt and "Response:\na" in reqs[0].prompt


def test_judge_prompt_truncates_response():
    p = judge_prompt("q", "x" * 50, response_chars=10)
    assert "x" * 10 + " [...]" in p and "x" * 11 not in p


def test_verifier_gate_with_fallback():
    llm = ScriptedLLM(judge=lambda q, r: "Score: 0.8")
    verifier = lambda q, r: None if q.id == "q1" else (1.0 if "right" in r else 0.0)
    gate = VerifierGate(verifier, theta=0.7, fallback=JudgeGate(llm))
    res = gate(_items("right", "anything", "wrong"))
    assert [(r.source, r.score, r.passed) for r in res] == [
        ("verifier", 1.0, True),
        ("judge", 0.8, True),
        ("verifier", 0.0, False),
    ]
    assert len(llm.calls) == 1
    no_fb = VerifierGate(verifier)
    assert [r.passed for r in no_fb(_items("right", "right"))] == [True, False]
    assert no_fb.stats["no_verifier"] == 1
    with pytest.raises(ValueError, match=r"q0.*\[0, 1\]"):
        VerifierGate(lambda q, r: 2.0)(_items("x"))


def test_verifier_from_records_injected_scorer():
    records = {"q0": {"true_answer": "42"}}
    v = verifier_from_records(
        records, lambda rec, completion: float(rec["true_answer"] in completion)
    )
    assert v(Query("q0", "?"), "it is 42") == 1.0
    assert v(Query("q0", "?"), "it is 41") == 0.0
    assert v(Query("other", "?"), "42") is None


def test_verifier_gate_over_the_project_rewards():
    pytest.importorskip("coevo_jax.rewards", reason="needs the reward verifiers")
    records = {
        "m": {"id": "m", "source": "t", "class": "math", "problem": "2+2?", "true_answer": "4"},
        "r": {
            "id": "r",
            "source": "t",
            "class": "reasoning",
            "problem": "A or B?",
            "true_answer": "B",
        },
    }
    gate = VerifierGate(verifier_from_records(records), theta=0.7)
    items = [
        GateItem(Query("m", "2+2?"), "math", "so \\boxed{4}"),
        GateItem(Query("m", "2+2?"), "code", "\\boxed{5}"),
        GateItem(Query("r", "A or B?"), "reasoning", "Answer: \\boxed{(B)}"),
    ]
    assert [(r.score, r.passed, r.source) for r in gate(items)] == [
        (1.0, True, "verifier"),
        (0.0, False, "verifier"),
        (1.0, True, "verifier"),
    ]


def test_default_verifier_does_not_pass_partially_correct_code():
    """theta = 0.7 on partial credit let a program failing a quarter of its tests in; the
    default verifier scores pass@1 on all tests."""
    records = {
        "c": {
            "id": "c",
            "class": "code",
            "problem": "add",
            "fn_name": "add",
            "test_cases": {
                "asserts": [
                    "assert add(1, 2) == 3",
                    "assert add(0, 0) == 0",
                    "assert add(5, 5) == 10",
                    "assert add(2, 2) == 5",
                ]
            },
        }
    }
    prog = "```python\ndef add(a, b):\n    return a + b\n```"  # 3 of 4 tests
    gate = VerifierGate(verifier_from_records(records), theta=0.7)
    (r,) = gate([GateItem(Query("c", "add"), "code", prog)])
    assert (r.score, r.passed) == (0.0, False)
