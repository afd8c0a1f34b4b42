"""Method selection, token and activation accounting on hand-made collections."""

import numpy as np
import pytest

from coevo_jax.eval.collect import Collected
from coevo_jax.eval.methods import (
    compare_to_reference,
    evaluate_methods,
    method_outcomes,
    sources,
    strict_scores,
    threshold_active,
)


def _collected():
    recs = [
        {"id": "m1", "class": "math", "source": "gsm8k", "problem": "?", "true_answer": "3"},
        {"id": "m2", "class": "math", "source": "gsm8k", "problem": "?", "true_answer": "5"},
        {"id": "c1", "class": "code", "source": "mbpp", "problem": "?"},
    ]
    f = np.array([[0.8, 0.1, 0.1], [0.3, 0.3, 0.3], [0.05, 0.6, 0.2]], np.float32)
    answers = [["3", "4", "4"], ["5", "6", "6"], [None, None, None]]
    scores = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
    tokens = np.array([[10, 20, 30], [5, 5, 5], [7, 8, 9]])
    texts = [[f"t{q}{a}" for a in range(3)] for q in range(3)]
    return Collected(
        recs,
        f,
        texts,
        ["b0", "b1", "b2"],
        scores,
        np.array([0.0, 1.0, 0.0], np.float32),
        tokens,
        np.array([3, 4, 5]),
        answers,
        router_ms=1.5,
    )


def test_threshold_routing_and_accounting():
    c = _collected()
    act = threshold_active(c.f, 0.7)
    np.testing.assert_array_equal(act, [[1, 0, 0], [1, 1, 1], [0, 1, 1]])
    res = evaluate_methods(c, tau=0.7, seed=0)
    cera = res["cera"]
    # q0: agent 0 alone -> right; q1: all three vote, "6" weighs 0.6 > "5" 0.3 -> wrong;
    # q2 (code): agents {1, 2} (0.6 + 0.2 reach 0.7); argmax f is agent 1 -> right
    assert cera["accuracy"] == pytest.approx(2 / 3)
    assert cera["tokens_per_query"] == pytest.approx((10 + 15 + 17) / 3)
    assert cera["agents_per_query"] == pytest.approx((1 + 3 + 2) / 3)
    assert cera["by_dataset"] == pytest.approx({"gsm8k": 0.5, "mbpp": 1.0})


def test_baselines():
    c = _collected()
    res = evaluate_methods(c, tau=0.7, taus=(0.2, 0.9))
    assert res["base"]["accuracy"] == pytest.approx(1 / 3) and res["base"]["tokens_per_query"] == 4
    assert res["single:0"]["accuracy"] == pytest.approx(2 / 3)
    assert res["oracle"]["accuracy"] == 1.0
    assert all(res["oracle"]["accuracy"] >= res[f"single:{i}"]["accuracy"] for i in range(3))
    assert res["top:1"]["agents_per_query"] == 1 and res["top:3"]["agents_per_query"] == 3
    assert res["random"]["agents_per_query"] == res["cera"]["agents_per_query"]
    # uniform vote on q1: "6" has two votes -> wrong; q0: "4" has two -> wrong
    assert res["uniform_vote"]["accuracy"] == pytest.approx(0.0)
    assert res["cera@0.2"]["agents_per_query"] <= res["cera@0.9"]["agents_per_query"]


def test_summary_has_strict_macro_and_intervals():
    c = _collected()
    c.scores[2] = [0.5, 0.75, 1.0]  # code: partial credit for agents 0 and 1
    res = evaluate_methods(c, tau=0.7)
    s0 = res["single:1"]
    # agent 1: q0 0, q1 0, q2 0.75 (partial) -> strict counts q2 as wrong
    assert s0["accuracy"] == pytest.approx(0.75 / 3)
    assert s0["strict"] == 0.0 and s0["strict_by_dataset"] == {"gsm8k": 0.0, "mbpp": 0.0}
    assert s0["macro"] == pytest.approx((0 + 0.75) / 2)
    assert res["single:2"]["strict"] == pytest.approx(1 / 3)
    assert res["single:2"]["macro_strict"] == pytest.approx((0 + 1) / 2)
    for r in res.values():
        for key in ("accuracy", "strict", "macro", "macro_strict"):
            lo, hi = r[f"{key}_ci"]
            assert 0 <= lo <= r[key] <= hi <= 1, (key, r)
        assert set(r["by_dataset_ci"]) == set(r["by_dataset"])


def test_strict_scores_match_the_verifiers_strict_mode():
    from coevo_jax.rewards import RewardConfig, score_batch

    code = {
        "id": "c",
        "class": "code",
        "test_cases": {"inputs": ["2\n", "3\n"], "outputs": ["4\n", "9\n"]},
    }
    ifr = {
        "id": "i",
        "class": "if",
        "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
        "kwargs": [{}, {}],
    }
    recs = [code, code, ifr, ifr]
    comps = [
        "```python\nn = int(input())\nprint(n * n)\n```",  # both tests pass
        "n = int(input())\nprint(n + n)",  # one of two passes
        "all lowercase and no commas here",
        "all lowercase, with a comma",  # one of two instructions
    ]
    partial = np.asarray(score_batch(recs, comps, workers=1))
    np.testing.assert_allclose(partial, [1.0, 0.5, 1.0, 0.5])
    strict = score_batch(
        recs, comps, workers=1, config=RewardConfig(code_strict=True, if_strict=True)
    )
    np.testing.assert_array_equal(strict_scores(partial), strict)
    np.testing.assert_array_equal(strict_scores(partial), [1, 0, 1, 0])


def test_compare_to_reference():
    c = _collected()
    outcomes = method_outcomes(c, tau=0.7, taus=(0.2,))
    cmp = compare_to_reference(outcomes, sources(c))
    assert "cera" not in cmp and "cera@0.2" not in cmp
    assert {"base", "oracle", "single:0", "top:3", "uniform_vote", "random"} <= set(cmp)
    for name, entry in cmp.items():
        for metric in ("accuracy", "strict"):
            m = entry[metric]
            want = outcomes["cera"].scores - outcomes[name].scores
            if metric == "strict":
                want = strict_scores(outcomes["cera"].scores) - strict_scores(outcomes[name].scores)
            assert m["diff"] == pytest.approx(want.mean())
            assert m["diff_ci"][0] <= m["diff"] <= m["diff_ci"][1]
            assert m["p_value"] <= m["p_holm"] <= 1
    # cera (2/3) against oracle (1.0): only the oracle gets q1 right
    assert cmp["oracle"]["accuracy"]["diff"] == pytest.approx(-1 / 3)
    assert (cmp["oracle"]["accuracy"]["a_only"], cmp["oracle"]["accuracy"]["b_only"]) == (0, 1)
