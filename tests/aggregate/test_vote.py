import pytest

from coevo_jax.aggregate import aggregate, familiarity_weighted_vote, most_familiar


def test_heavy_agent_beats_two_light_ones():
    out = familiarity_weighted_vote(["7", "5", "5"], [0.9, 0.4, 0.4])
    assert out.answer == "7" and out.index == 0
    assert out.weights == pytest.approx({"7": 0.9, "5": 0.8})


def test_two_light_agents_beat_one_heavier():
    out = familiarity_weighted_vote(["7", "5", "5"], [0.7, 0.4, 0.5])
    assert out.answer == "5"
    assert out.index == 2  # the most familiar member of the winning group


def test_tie_goes_to_group_with_most_familiar_agent_then_lower_index():
    out = familiarity_weighted_vote(["a", "b", "b"], [0.6, 0.3, 0.3])
    assert out.answer == "a"
    out = familiarity_weighted_vote(["a", "b"], [0.5, 0.5])
    assert out.answer == "a" and out.index == 0


def test_no_extractable_answer_falls_back_to_most_familiar():
    out = familiarity_weighted_vote([None, None, None], [0.2, 0.8, 0.1])
    assert out.answer is None and out.index == 1


def test_unextractable_agents_do_not_vote():
    out = familiarity_weighted_vote([None, "3"], [0.99, 0.1])
    assert out.answer == "3" and out.index == 1


def test_open_ended_classes_take_argmax_familiarity():
    out = aggregate("code", ["x", "y", "z"], [0.1, 0.5, 0.5], extract=lambda c: c)
    assert out.index == 1 and out.answer is None
    out = aggregate(
        "math", ["\\boxed{2}", "\\boxed{3}", "\\boxed{3}"], [0.5, 0.3, 0.3], extract=lambda c: c[7]
    )
    assert out.answer == "3" and out.index == 1


def test_bad_inputs():
    with pytest.raises(ValueError):
        familiarity_weighted_vote(["1"], [0.1, 0.2])
    with pytest.raises(ValueError):
        most_familiar([])
