"""The orchestrators' paper metrics: solved = pass@1 on all tests / exact match / F1 = 1."""

import pytest

from coevo_jax.orchestrators.scoring import Outcome, as_outcome, metric_of, task_outcome
from coevo_jax.rewards import score as training_reward

CODE = {
    "id": "c1",
    "class": "code",
    "problem": "Write add(a, b).",
    "fn_name": "add",
    "test_cases": {
        "asserts": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(2, 2) == 5"]
    },
}
HALF = "```python\ndef add(a, b):\n    return a + b\n```"  # passes 2 of 3 tests


def test_code_is_solved_only_when_every_test_passes():
    o = task_outcome(CODE, HALF)
    assert o.metric == "pass@1"
    assert o.partial == pytest.approx(2 / 3)
    assert o.score == 0.0 and not o.solved
    assert o.key == (True, True, False)
    # the training reward keeps partial credit (and crossed the old 0.5 "solved" line)
    assert training_reward(CODE, HALF) == pytest.approx(2 / 3)
    allpass = dict(CODE, test_cases={"asserts": CODE["test_cases"]["asserts"][:2]})
    assert task_outcome(allpass, HALF).solved


def test_code_outcome_keys_compare_results_not_text():
    a = "```python\ndef add(a, b):\n    return a + b\n```"
    b = "```python\ndef add(x, y):\n    # same behaviour, different text\n    return y + x\n```"
    assert task_outcome(CODE, a).key == task_outcome(CODE, b).key


def test_math_exact_match_and_answer_key():
    rec = {"id": "m1", "class": "math", "problem": "1/2+1/2?", "true_answer": "1"}
    o = task_outcome(rec, "so \\boxed{1}")
    assert (o.metric, o.score, o.solved, o.key) == ("exact_match", 1.0, True, "1")
    assert task_outcome(rec, "\\boxed{2}").score == 0.0


def test_qa_is_token_f1():
    rec = {
        "id": "h1",
        "class": "reasoning",
        "source": "hotpotqa",
        "problem": "Where?",
        "true_answer": "Paris, France",
    }
    assert metric_of(rec) == "f1"
    o = task_outcome(rec, "The answer is \\boxed{Paris}")
    assert o.score == pytest.approx(2 / 3) and not o.solved


def test_float_rewards_wrap_and_bad_values_name_the_record():
    assert as_outcome(0.5, CODE) == Outcome("reward", 0.5, 0.5, None)
    with pytest.raises(ValueError, match="c1"):
        as_outcome(1.5, CODE)
    with pytest.raises(ValueError, match="class"):
        metric_of({"id": "x", "class": "poetry"})
