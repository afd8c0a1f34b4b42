"""The probe's pure pieces, against hand cases and sklearn."""

import numpy as np
import pytest

from coevo_jax.train import probe


def test_stratified_indices_spread_over_domains_and_are_deterministic():
    domains = ["a"] * 10 + ["b"] * 3 + ["c"] * 20
    idx = probe.stratified_indices(domains, 9, seed=1)
    assert idx == probe.stratified_indices(domains, 9, seed=1)
    assert idx != probe.stratified_indices(domains, 9, seed=2)
    picked = [domains[i] for i in idx]
    assert picked.count("a") == picked.count("b") == picked.count("c") == 3
    # a small domain runs out and the others fill the rest
    idx = probe.stratified_indices(domains, 12, seed=0)
    picked = [domains[i] for i in idx]
    assert (picked.count("a"), picked.count("b"), picked.count("c")) == (5, 3, 4)
    assert len(probe.stratified_indices(domains, 100, seed=0)) == len(domains)
    with pytest.raises(ValueError, match="probe size"):
        probe.stratified_indices(domains, 0, seed=0)


def test_macro_average_weights_domains_equally():
    macro, per = probe.macro_average(np.array([1.0, 1.0, 1.0, 0.0]), ["a", "a", "a", "b"])
    assert per == {"a": 1.0, "b": 0.0}
    assert macro == 0.5  # the query-weighted mean would be 0.75
    with pytest.raises(ValueError, match="length"):
        probe.macro_average(np.ones(3), ["a"])


def test_routing_nmi_hand_cases():
    dom = ["x", "x", "y", "y"]
    assert probe.routing_nmi(dom, np.array([0, 0, 1, 1])) == pytest.approx(1.0)
    assert probe.routing_nmi(dom, np.array([2, 2, 3, 3])) == pytest.approx(1.0)  # labels free
    assert probe.routing_nmi(dom, np.array([0, 1, 0, 1])) == pytest.approx(0.0)
    assert probe.routing_nmi(dom, np.array([0, 0, 0, 0])) == pytest.approx(0.0)
    # against the definition: I(D; A) / mean(H(D), H(A)), natural logs
    d = ["a", "a", "b", "b", "b", "c"]
    a = np.array([0, 1, 1, 1, 2, 2])
    joint = np.zeros((3, 3))
    for di, ai in zip(d, a, strict=True):
        joint["abc".index(di), ai] += 1
    p = joint / joint.sum()
    pd, pa = p.sum(1), p.sum(0)
    nz = p > 0
    mi = (p[nz] * np.log(p[nz] / np.outer(pd, pa)[nz])).sum()

    def h(q):
        return -(q[q > 0] * np.log(q[q > 0])).sum()

    assert probe.routing_nmi(d, a) == pytest.approx(mi / ((h(pd) + h(pa)) / 2))


def test_eval_activation_is_threshold_on_familiarity_alone():
    f = np.array([[0.8, 0.1, 0.05, 0.05], [0.3, 0.3, 0.3, 0.05], [0.1, 0.1, 0.1, 0.1]])
    act = probe.eval_activation(f, tau=0.7)
    assert act.sum(axis=1).tolist() == [1, 3, 4]
    assert act[0].tolist() == [True, False, False, False]
    top2 = probe.eval_activation(f, tau=0.7, routing="top_k", top_k=2)
    assert top2.sum(axis=1).tolist() == [2, 2, 2]


def test_summarize_fields():
    dom = ["a", "a", "b", "b"]
    f = np.array([[0.9, 0.1], [0.8, 0.1], [0.1, 0.2], [0.2, 0.3]])
    active = np.array([[True, False], [True, False], [True, True], [True, True]])
    out = probe.summarize(dom, f, active, np.array([1.0, 0.0, 1.0, 1.0]), np.array([4, 6, 8, 2]))
    assert out["macro_reward"] == 0.75
    assert out["reward_by_domain"] == {"a": 0.5, "b": 1.0}
    assert out["mean_active"] == 1.5
    assert out["active_by_domain"] == {"a": 1.0, "b": 2.0}
    assert out["top1_by_domain"] == {"a": [2, 0], "b": [0, 2]}
    assert out["nmi"] == pytest.approx(1.0)
    assert out["familiarity_by_domain"]["a"] == pytest.approx([0.85, 0.1])
    assert out["tokens_per_query"] == 5.0
    with pytest.raises(ValueError, match="disagree"):
        probe.summarize(dom, f[:3], active, np.ones(4), np.ones(4))


def test_probe_set_samples_by_source():
    recs = [{"id": str(i), "source": "s" + str(i % 3), "class": "math"} for i in range(30)]
    ps = probe.ProbeSet.sample(recs, 6, seed=0)
    assert sorted(ps.domains) == ["s0", "s0", "s1", "s1", "s2", "s2"]
    assert [probe.domain_of(r) for r in ps.records] == ps.domains
    assert probe.domain_of({"id": "x", "class": "code"}) == "code"


def test_mean_by_label_groups_rows_and_keeps_the_dtype():
    import numpy as np

    from coevo_jax.train.probe import mean_by_label

    v = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0]], np.float32)
    out = mean_by_label(v, ["b", "a", "b"])
    assert list(out) == ["a", "b"]
    assert out == {"a": [3.0, 2.0], "b": [3.0, 2.0]}
    assert out["b"] == v[[0, 2]].mean(axis=0).tolist()  # float32 mean, as the loop logs it
