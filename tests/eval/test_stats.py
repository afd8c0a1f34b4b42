"""Bootstrap intervals, macro averages and paired tests against scipy and hand cases."""

import itertools

import numpy as np
import pytest
import scipy.stats

from coevo_jax.eval import stats


def _binary(n, p, seed):
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_bootstrap_ci_is_scipy_percentile_interval():
    x = _binary(300, 0.3, seed=1)
    want = scipy.stats.bootstrap(
        (x,),
        np.mean,
        confidence_level=0.9,
        n_resamples=500,
        method="percentile",
        rng=np.random.default_rng(7),
    ).confidence_interval
    assert stats.bootstrap_ci(x, confidence=0.9, n_resamples=500, seed=7) == (
        pytest.approx(want.low),
        pytest.approx(want.high),
    )


def test_bootstrap_ci_width_matches_binomial_standard_error():
    x = _binary(400, 0.4, seed=2)
    lo, hi = stats.bootstrap_ci(x, n_resamples=4000)
    m = x.mean()
    se = np.sqrt(m * (1 - m) / x.size)
    assert lo < m < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.1)
    # seeded: the same call gives the same interval, another seed a (slightly) different one
    assert stats.bootstrap_ci(x, n_resamples=4000) == (lo, hi)
    assert stats.bootstrap_ci(x, n_resamples=4000, seed=1) != (lo, hi)


def test_bootstrap_ci_degenerate_and_bad_input():
    assert stats.bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert stats.bootstrap_ci([0.25]) == (0.25, 0.25)
    with pytest.raises(ValueError, match="empty"):
        stats.bootstrap_ci([])
    with pytest.raises(ValueError, match="1-D"):
        stats.bootstrap_ci(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="non-finite"):
        stats.bootstrap_ci([0.0, np.nan])


def test_macro_mean_weights_datasets_equally():
    x = [1, 1, 1, 0, 0, 1.0]  # a: 3/3, b: 1/3
    g = ["a", "a", "a", "b", "b", "b"]
    assert stats.macro_mean(x, g) == pytest.approx((1 + 1 / 3) / 2)
    # query-weighted and macro differ when datasets differ in size
    x2, g2 = [1, 0, 0, 0, 0.0], ["a", "b", "b", "b", "b"]
    assert stats.macro_mean(x2, g2) == pytest.approx(0.5)
    assert np.mean(x2) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="labels"):
        stats.macro_mean([1.0, 0.0], ["a"])


def test_macro_ci_is_stratified():
    # dataset a is all right and b all wrong: every within-dataset replicate has macro 0.5,
    # while an unstratified resample of the pooled queries would move
    x = np.r_[np.ones(50), np.zeros(50)]
    g = ["a"] * 50 + ["b"] * 50
    assert stats.macro_bootstrap_ci(x, g) == (0.5, 0.5)
    assert stats.bootstrap_ci(x)[1] - stats.bootstrap_ci(x)[0] > 0.1
    # a one-query dataset enters as a constant; the other is resampled
    y = np.r_[_binary(200, 0.5, seed=3), [1.0]]
    h = ["a"] * 200 + ["b"]
    lo, hi = stats.macro_bootstrap_ci(y, h, n_resamples=4000)
    lo_a, hi_a = stats.bootstrap_ci(y[:200], n_resamples=4000)
    assert lo == pytest.approx((lo_a + 1) / 2, abs=0.01)
    assert hi == pytest.approx((hi_a + 1) / 2, abs=0.01)


def test_macro_ci_width_matches_stratified_standard_error():
    rng = np.random.default_rng(4)
    parts = [(rng.random(n) < p).astype(float) for n, p in ((100, 0.2), (300, 0.6), (50, 0.5))]
    x = np.concatenate(parts)
    g = [k for k, p in enumerate(parts) for _ in p]
    se = np.sqrt(sum(p.var() / p.size for p in parts)) / len(parts)
    lo, hi = stats.macro_bootstrap_ci(x, g, n_resamples=4000)
    assert lo < stats.macro_mean(x, g) < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_mcnemar_exact_hand_case():
    # 8 queries only A gets right, 2 only B, 5 both: p = 2 * P(Bin(10, 1/2) <= 2) = 112/1024
    a = [1] * 8 + [0] * 2 + [1] * 5
    b = [0] * 8 + [1] * 2 + [1] * 5
    t = stats.mcnemar_exact(a, b)
    assert (t.test, t.a_only, t.b_only) == ("mcnemar_exact", 8, 2)
    assert t.p_value == pytest.approx(112 / 1024)
    assert stats.mcnemar_exact([1, 0], [1, 0]).p_value == 1.0
    with pytest.raises(ValueError, match="0/1"):
        stats.mcnemar_exact([0.5, 1], [1, 1])
    with pytest.raises(ValueError, match="length"):
        stats.mcnemar_exact([1, 1], [1])


def test_paired_permutation_is_exact_sign_flip():
    a, b = np.array([0.5, 1.0, 0.75, 0.0]), np.array([0.0, 0.25, 0.5, 0.25])
    d = a - b
    # enumerate all 2^4 sign flips of the differences by hand
    flips = [np.mean(np.array(s) * d) for s in itertools.product((1, -1), repeat=4)]
    want = np.mean(np.abs(flips) >= abs(d.mean()) - 1e-12)
    t = stats.paired_permutation(a, b)
    assert t.test == "paired_permutation"
    assert t.p_value == pytest.approx(want)
    assert stats.paired_permutation(a, a).p_value == 1.0


def test_paired_test_picks_the_test_by_score_type():
    assert stats.paired_test([1, 0, 1], [0, 0, 1]).test == "mcnemar_exact"
    assert stats.paired_test([1, 0.5, 1], [0, 0, 1]).test == "paired_permutation"


def test_holm_hand_case():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []


def test_compare_paired_fields_and_intervals():
    rng = np.random.default_rng(5)
    b = (rng.random(300) < 0.4).astype(float)
    a = np.where(rng.random(300) < 0.2, 1.0, b)  # A = B plus extra successes
    g = ["x"] * 150 + ["y"] * 150
    r = stats.compare_paired(a, b, g)
    assert r["diff"] == pytest.approx(a.mean() - b.mean())
    assert r["macro_diff"] == pytest.approx(stats.macro_mean(a - b, g))
    assert 0 < r["diff_ci"][0] <= r["diff"] <= r["diff_ci"][1]
    assert r["macro_diff_ci"][0] <= r["macro_diff"] <= r["macro_diff_ci"][1]
    assert r["test"] == "mcnemar_exact" and r["b_only"] == 0 and r["p_value"] < 1e-6


def test_summarise_fields():
    x = np.array([1, 0, 1, 1, 0, 0.5])
    g = ["a", "a", "a", "b", "b", "b"]
    s = stats.summarise(x, g)
    assert s["mean"] == pytest.approx(x.mean())
    assert s["by_group"] == pytest.approx({"a": 2 / 3, "b": 0.5})
    assert set(s["by_group_ci"]) == {"a", "b"}
    for point, (lo, hi) in [(s["mean"], s["ci"]), (s["macro"], s["macro_ci"])]:
        assert 0 <= lo <= point <= hi <= 1


def test_query_bootstrap_ci_of_routing_nmi():
    from coevo_jax.train.probe import routing_nmi

    domains = np.repeat(["a", "b", "c", "d"], 60)
    perfect = np.repeat([0, 1, 2, 3], 60)
    assert stats.query_bootstrap_ci(routing_nmi, domains, perfect, n_resamples=200) == (1.0, 1.0)
    noisy = np.where(np.random.default_rng(0).random(240) < 0.5, perfect, 0)
    point = routing_nmi(domains, noisy)
    lo, hi = stats.query_bootstrap_ci(routing_nmi, domains, noisy, n_resamples=500)
    assert 0 < lo < point < hi < 1 and hi - lo < 0.25
    with pytest.raises(ValueError, match="differ in length"):
        stats.query_bootstrap_ci(routing_nmi, domains, perfect[:10])


def test_query_bootstrap_ci_of_a_mean_is_bootstrap_ci():
    x = np.random.default_rng(1).random(50)
    lo, hi = stats.query_bootstrap_ci(np.mean, x, n_resamples=2000)
    ref_lo, ref_hi = stats.bootstrap_ci(x, n_resamples=2000)
    assert abs(lo - ref_lo) < 0.02 and abs(hi - ref_hi) < 0.02
