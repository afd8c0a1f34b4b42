"""General-reasoning verifier: the math extractor plus the docs/design.md §5 normalisation."""

import pytest

from coevo_jax.rewards import reasoning


@pytest.mark.parametrize(
    "boxed,gold,want",
    [
        ("(A)", "A", 1),
        ("a", "(A)", 1),
        ("\\text{(B)}", "B", 1),
        ("Answer: C", "(C)", 1),
        ("The answer is: d", "D", 1),
        ("True", "true", 1),
        ("  Not   plausible ", "not plausible", 1),
        ("valid.", "valid", 1),
        ("((B))", "B", 1),
        ("$\\text{No}$", "no", 1),
        ("(A)", "B", 0),
        ("False", "True", 0),
        ("invalid", "valid", 0),
        ("(A) (B)", "A", 0),
        ("", "A", 0),
    ],
)
def test_score(boxed, gold, want):
    assert reasoning.score(f"Let me think. \\boxed{{{boxed}}}", gold) == want


def test_no_box_scores_zero():
    assert reasoning.score("The answer is (A)", "A") == 0.0
    assert reasoning.score("\\boxed{A} then \\boxed{B}", "B") == 1.0


def test_normalize():
    assert reasoning.normalize("(a)") == "A"
    assert reasoning.normalize("Answer:   Hello   World") == "hello world"
    assert reasoning.normalize("(1, 2)") == "1, 2"
    assert reasoning.normalize("(1) and (2)") == "(1) and (2)"
