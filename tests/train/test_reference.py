"""The CPU reference config end to end, shrunk: 2 rounds with probes, then its evaluation
on 4 held-out queries; every metric field is present and the intervals are well formed."""

import json

import numpy as np
import pytest

from coevo_jax.train.config import CONFIG_DIR, load_config
from coevo_jax.train.loop import Trainer

SHRINK = [
    "loop.rounds=2",
    "loop.queries_per_round=2",
    "loop.groups_per_step=1",
    "loop.checkpoint_every=1",
    "loop.plot_every=2",
    "loop.probe_every=1",
    "loop.probe_size=4",
    "loop.probe_max_new_tokens=4",
    "rollout.group_size=2",
    "rollout.max_new_tokens=6",
]

ROUND_KEYS = {
    "round", "system_reward", "agent_reward", "familiarity", "activated", "updates",
    "versions", "tokens_generated", "entropy", "buffers", "dropped_flat", "dropped_overflow",
    "capped", "failures", "policy", "router", "counters", "timings", "probe",
}  # fmt: skip
PROBE_KEYS = {
    "after_rounds", "queries", "macro_reward", "reward_by_domain", "mean_active",
    "active_by_domain", "familiarity_by_domain", "top1_by_domain", "nmi",
    "tokens_per_query", "failed",
}  # fmt: skip
DOMAINS = {"ref_few_words", "ref_many_words", "ref_few_sentences", "ref_many_sentences"}


@pytest.mark.slow
def test_reference_config_two_rounds_and_eval(tmp_path):
    cfg = load_config(CONFIG_DIR / "cpu_reference.yaml", SHRINK)
    assert cfg.data.mixture == "conflict" and cfg.rollout.engine == "inprocess"
    assert cfg.router.feature_norm == "standardize" and cfg.router.replay_rounds == 8
    run = tmp_path / "run"
    tr = Trainer(cfg, run, progress=False)
    rows = tr.run()
    tr.close()
    assert [m["round"] for m in rows] == [1, 2]
    for m in rows:
        assert ROUND_KEYS <= set(m), ROUND_KEYS - set(m)
        p = m["probe"]
        assert PROBE_KEYS <= set(p), PROBE_KEYS - set(p)
        assert p["after_rounds"] == m["round"] - 1 and p["queries"] == 4
        assert set(p["reward_by_domain"]) == DOMAINS
        assert 1 <= p["mean_active"] <= 4 and 0 <= p["nmi"] <= 1
        assert 0 <= p["macro_reward"] <= 1
        assert all(len(v) == 4 for v in p["familiarity_by_domain"].values())
    on_disk = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["probe"]["macro_reward"] for m in on_disk] == [
        m["probe"]["macro_reward"] for m in rows
    ]
    assert (run / "plots" / "probe_curves.png").is_file()
    with np.load(run / "router_features.npz") as z:
        assert z["h"].shape[0] == 4 and int(z["seen"]) == 4

    from coevo_jax.eval.runner import evaluate_run

    payload = evaluate_run(run, suite="id", limit=1, taus=(0.7,))
    assert sum(payload["queries_by_dataset"].values()) == 4
    assert set(payload["queries_by_dataset"]) == DOMAINS
    assert payload["max_new_tokens"] == 6  # the run's budget
    res = payload["results"]
    assert {"cera", "base", "oracle", "uniform_vote", "random", "top:1", "top:2"} <= set(res)
    for name, r in res.items():
        for key in ("accuracy", "strict", "macro", "macro_strict"):
            lo, hi = r[f"{key}_ci"]
            assert 0 <= lo <= r[key] <= hi <= 1, (name, key)
        assert r["tokens_per_query"] >= 0
