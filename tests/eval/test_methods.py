"""Method selection, token and activation accounting on hand-made collections."""

import numpy as np
import pytest

from coevo_jax.eval.collect import Collected
from coevo_jax.eval.methods import evaluate_methods, threshold_active


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
