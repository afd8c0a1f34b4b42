import math

import numpy as np
import pytest

from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.explore import (
    explore,
    explore_value,
    redundancy_adjusted,
    select_explore,
    uncertainty,
)
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.retrieval import ProfileRetriever


def test_formulas_hand_computed():
    np.testing.assert_allclose(uncertainty([0, 5, 10], 0.5), [1.0, math.exp(-2.5), math.exp(-5.0)])
    assert uncertainty(4, 0.25) == pytest.approx(math.exp(-1.0))
    assert explore_value(0.5, 0.8) == pytest.approx(0.4)
    # V+ = V (1 - beta R): 0.4 * (1 - 0.5 * 0.8) = 0.24
    assert redundancy_adjusted(0.4, 0.8, 0.5) == pytest.approx(0.24)
    u, r = uncertainty(5, 0.5), 1.0
    assert redundancy_adjusted(explore_value(u, r), r, 0.5) == pytest.approx(0.0820849986 * 0.5)
    np.testing.assert_allclose(
        redundancy_adjusted(explore_value([1.0, 0.5], [0.2, 0.0]), [0.2, 0.0], 1.0), [0.16, 0.0]
    )


def test_select_above_gamma_best_first_capped():
    vp = {"a": 0.07, "b": 0.2, "c": 0.1, "d": 0.01}
    assert select_explore(vp, set(), gamma=0.06, n_explore=2) == (["b", "c"], False)
    assert select_explore(vp, {"b"}, gamma=0.06, n_explore=2) == (["c", "a"], False)
    assert select_explore(vp, set(), gamma=0.06, n_explore=0) == ([], False)


def test_select_fallback_top_by_vplus_but_never_zero_relevance():
    vp = {"a": 0.01, "b": 0.0, "c": 0.03, "d": 0.02}
    assert select_explore(vp, set(), gamma=0.06, n_explore=2) == (["c", "d"], True)
    assert select_explore({"a": 0.0, "b": 0.0}, set(), gamma=0.06, n_explore=2) == ([], True)
    assert select_explore(vp, {"c"}, gamma=0.06, n_explore=2, floor=0.015) == (["d"], True)
    # ties keep registration order
    assert select_explore({"x": 0.01, "y": 0.01, "z": 0.01}, set(), gamma=1, n_explore=2) == (
        ["x", "y"],
        True,
    )


def test_explore_end_to_end_values():
    s = ProfileStore()
    s.register("math", [f"integral {i}" for i in range(5)])
    s.register("code", [f"python {i}" for i in range(5)])
    for i in range(5):
        s.add_success("math", f"integral more {i}", "r", 0.9)  # |E_math| = 5 gated
    sc = ProfileRetriever(s).score("integral python")
    cfg = FlyRouteConfig()
    res = explore(s, sc, [], cfg)
    rel = sc.relevance
    for a, n in (("math", 5), ("code", 0)):  # registration seeds do not count
        assert res.u[a] == pytest.approx(math.exp(-0.5 * n))
        assert res.r[a] == pytest.approx(rel[a])
        assert res.v[a] == pytest.approx(res.u[a] * rel[a])
        assert res.vplus[a] == pytest.approx(res.v[a] * (1 - 0.5 * rel[a]))
    # code (no gated success, U = 1) passes gamma; math (U = e^-2.5, V+ <= 0.041) does not
    assert res.vplus["code"] >= cfg.gamma > res.vplus["math"]
    assert not res.fallback and res.selected == ["code"]
    # with code already exploited nothing passes gamma: the fallback takes math
    assert explore(s, sc, ["code"], cfg).selected == ["math"]
    assert explore(s, sc, ["code"], cfg).fallback


def test_gamma_gates_while_few_successes_and_stops_once_many():
    """|E| counts gated successes: a freshly registered agent (5 seeds) is explored through
    the gamma gate; once it has many gated successes its V+ falls below gamma."""
    s = ProfileStore()
    s.register("math", [f"integral {i}" for i in range(5)])
    s.register("code", [f"python {i}" for i in range(5)])
    cfg = FlyRouteConfig()  # alpha 0.5, beta 0.5, gamma 0.06
    q = "integral"
    res = explore(s, ProfileRetriever(s).score(q), ["code"], cfg)
    # R(math) = 1, |E| = 0: U = 1, V = 1, V+ = 1 * (1 - 0.5) = 0.5 >= 0.06
    assert res.u["math"] == 1.0 and res.vplus["math"] == pytest.approx(0.5)
    assert res.selected == ["math"] and not res.fallback
    seen = []
    for i in range(8):
        s.add_success("math", f"integral solved {i}", "r", 0.9)
        res = explore(s, ProfileRetriever(s).score(q), ["code"], cfg)
        seen.append(res.fallback)
    # |E| = 1..8: V+ = 0.5 e^{-|E|/2} = 0.303, 0.184, 0.112, 0.068, 0.041, ... (R stays 1)
    assert res.vplus["math"] == pytest.approx(0.5 * math.exp(-4.0))
    assert seen == [False, False, False, False, True, True, True, True]
