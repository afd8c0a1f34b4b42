"""benchmarks/router_replay.py: the router replayed alone on measured agents."""

import dataclasses
import json

import numpy as np

from benchmarks import router_replay
from tests.train._tiny import tiny_config

CONFLICT = ["ref_few_sentences", "ref_few_words", "ref_many_sentences", "ref_many_words"]


def _report(p, base):
    res = {"base": {"by_dataset": dict(zip(CONFLICT, base, strict=True))}}
    for i, row in enumerate(p):
        res[f"single:{i}"] = {"by_dataset": dict(zip(CONFLICT, row, strict=True))}
    return {"results": res}


def test_accuracies_are_read_by_agent_and_sorted_domain():
    p = [[0.9, 0.8, 0.1, 0.0], [0.0, 0.1, 0.7, 0.6]]
    domains, got, base = router_replay.held_out_accuracy(_report(p, [0.2, 0.4, 0.1, 0.2]), 2)
    assert domains == CONFLICT
    np.testing.assert_array_equal(got, p)
    np.testing.assert_array_equal(base, [0.2, 0.4, 0.1, 0.2])


def _clusters(n, seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 2, n)
    mu = np.zeros((2, 16))
    mu[0, 0], mu[1, 1] = 4.0, 4.0
    return (mu[d] + rng.normal(size=(n, 16))).astype(np.float32), d


def test_a_router_that_trains_more_per_round_routes_two_specialists_apart():
    cfg = tiny_config()
    cfg = dataclasses.replace(cfg, router=dataclasses.replace(cfg.router, c_ucb=0.0, w_ent=0.0))
    h_tr, d_tr = _clusters(64, 0)
    h_ev, d_ev = _clusters(40, 1)
    p_end = np.array([[1.0, 0.0], [0.0, 1.0]])  # agent 0 solves cluster 0 only, and back
    kw = dict(rounds=30, ramp=0, every=10, seed=0)
    args = (h_tr, d_tr, h_ev, d_ev, p_end, np.full((2, 2), 0.5))
    curve = router_replay.replay(cfg, (8, 4), *args, **kw)
    assert [r["round"] for r in curve] == [0, 10, 20, 30]
    assert curve[-1]["nmi"] > 0.9 and curve[-1]["top1_accuracy"] > 0.95
    assert router_replay.replay(cfg, (8, 4), *args, **kw) == curve  # one seed, one answer
    # the paper's schedule on the same rounds learns less
    assert router_replay.replay(cfg, (1, 1), *args, **kw)[-1]["nmi"] < curve[-1]["nmi"]


def test_target_coherence_is_one_for_identical_queries_and_grows_with_less_centring():
    cfg = tiny_config()
    h, d = _clusters(64, 0)
    h = h + 20.0  # a shared direction, as a chat template's last token gives
    ones = router_replay.target_coherence(
        router_replay.initial_router(cfg.router, h, 0), np.repeat(h[:1], 8, 0), np.zeros(8)
    )
    assert ones["coherence"] == 1.0 and ones["f_constant"] == 1.0

    def coherence(center):
        rc = dataclasses.replace(cfg.router, feature_norm="standardize", feature_center=center)
        return router_replay.target_coherence(router_replay.initial_router(rc, h, 0), h, d)

    full, half, none = coherence(1.0), coherence(0.5), coherence(0.0)
    assert full["coherence"] < half["coherence"] < none["coherence"] <= 1.0
    assert full["f_constant"] < half["f_constant"] < none["f_constant"]


def test_main_writes_the_result_and_its_plot(tmp_path):
    from coevo_jax import data

    rounds = 2
    built = data.build_mixture("conflict", seed=42)
    rng = np.random.default_rng(0)
    feats = {s: rng.normal(size=(len(built.records[s]), 1152)).astype(np.float32)
             for s in ("train", "eval_id")}  # fmt: skip
    np.savez(tmp_path / "feats.npz", **feats)
    (tmp_path / "report.json").write_text(json.dumps(_report(np.eye(4).tolist(), [0.2] * 4)))
    out = tmp_path / "out"
    result = router_replay.main(
        [
            "--run-config", "configs/cpu_conflict.yaml",
            "--report", str(tmp_path / "report.json"),
            "--out", str(out),
            "--features", str(tmp_path / "feats.npz"),
            "--schedules", "1x1,2x2",
            "--ramps", "0",
            "--seeds", "2",
            "--rounds", str(rounds),
            "--feature-center", "0.5",
        ]
    )  # fmt: skip
    saved = json.loads((out / "router_replay.json").read_text())
    assert saved["ramps"].keys() == {"0"} and saved["ramps"]["0"].keys() == {"1x1", "2x2"}
    assert saved["queries"] == {"train": 1200, "eval_id": 240}
    assert saved["feature_center"] == 0.5  # the run's config centres fully; overridden
    assert 0 < saved["target_coherence"]["coherence"] <= 1
    entry = saved["ramps"]["0"]["2x2"]
    assert len(entry["curves"]) == 2 and entry["curves"][0][-1]["round"] == rounds
    assert entry["end"]["mean_active"]["min"] <= entry["end"]["mean_active"]["mean"]
    assert (out / "router_replay.png").stat().st_size > 10_000
    assert result["rounds"] == rounds
