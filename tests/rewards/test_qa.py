import pytest

from coevo_jax.rewards.qa import exact_match, normalize_answer, token_f1


def test_normalize_answer_follows_squad():
    assert normalize_answer("The  Eiffel-Tower, in Paris!") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    # articles are dropped only as whole words
    assert normalize_answer("Theatre and anthem") == "theatre and anthem"


def test_token_f1_hand_computed():
    # pred tokens: [cat, sat, on, mat, mat]; gold tokens: [cat, sat, on, red, mat]
    # common multiset: cat, sat, on, mat -> 4 (the second "mat" has no partner)
    # precision 4/5, recall 4/5 -> F1 0.8
    assert token_f1("The cat sat on the mat mat.", "a cat sat on the red mat") == pytest.approx(0.8)
    # pred [paris]; gold [paris, france]: P = 1, R = 1/2, F1 = 2/3
    assert token_f1("Paris", "Paris, France") == pytest.approx(2 / 3)
    assert token_f1("London", "Paris") == 0.0


def test_token_f1_takes_the_best_gold_and_handles_empty():
    assert token_f1("Paris", ["Paris, France", "paris"]) == 1.0
    assert token_f1("the", "a") == 1.0  # both normalise to empty
    assert token_f1("", "Paris") == 0.0
    with pytest.raises(ValueError, match="at least one gold"):
        token_f1("x", [])


def test_exact_match_normalises():
    assert exact_match("The Beatles!", "beatles") == 1.0
    assert exact_match("Beatles band", "beatles") == 0.0
