"""The loop's per-agent step budget, bounded logs and held-out probe, on a tiny model."""

import json

import numpy as np
import pytest

from tests.train._tiny import tiny_config, tiny_records, tiny_trainer

pytestmark = pytest.mark.slow  # each compiles the tiny loop: minutes on a shared CPU


def _trainer(tmp_path, probe_records=None, **loop):
    return tiny_trainer(tiny_config(**loop), tmp_path, probe_records=probe_records)


def test_an_agent_at_its_budget_is_not_routed_and_keeps_no_buffer(tmp_path):
    tr = _trainer(tmp_path, rounds=8, groups_per_step=1, max_policy_steps=2)
    rows = tr.run()
    steps = [m["updates"] for m in rows]
    assert max(max(s) for s in steps) == 2  # nobody overshoots its budget
    for prev, m in zip(rows, rows[1:], strict=False):
        for a, capped in enumerate(prev["capped"]):
            if capped:  # capped before this round: never activated, nothing buffered
                assert m["activated"]["per_agent"][a] == 0
                assert m["buffers"][a] == 0
    # every query still reaches an uncapped agent
    assert all(m["activated"]["mean_per_query"] >= 1 for m in rows)
    # the run ends when every agent has spent its budget
    assert rows[-1]["capped"] == [True, True] or len(rows) == 8
    if rows[-1]["capped"] == [True, True]:
        assert not any(all(m["capped"]) for m in rows[:-1])


def test_buffers_are_bounded(tmp_path):
    # groups_per_step larger than what arrives: buffers fill up to their capacity only
    tr = _trainer(tmp_path, rounds=4, groups_per_step=3, buffer_capacity=3)
    tr.cfg = tr.cfg  # frozen config: capacity comes from loop.buffer_capacity
    rows = tr.run()
    assert all(b <= 3 for m in rows for b in m["buffers"])


def test_feature_log_is_an_array_file_and_resumes(tmp_path):
    tr = _trainer(tmp_path, rounds=3, checkpoint_every=1, feature_log_size=5)
    tr.run()
    ckpt = sorted((tmp_path / "checkpoints").glob("round_*"))[-1]
    host = json.loads((ckpt / "state.json").read_text())
    assert set(host["features_log"]) == {"file", "seen"}  # no feature vectors in JSON
    assert host["features_log"]["seen"] == 12
    with np.load(tmp_path / "checkpoints" / host["features_log"]["file"]) as z:
        assert z["h"].shape[0] == 5 and int(z["seen"]) == 12
    kept = {p.name for p in (tmp_path / "checkpoints").glob("features_*.npz")}
    assert kept == {
        f"features_{p.name[6:]}.npz" for p in (tmp_path / "checkpoints").glob("round_*")
    }
    with np.load(tmp_path / "router_features.npz") as z:
        assert z["h"].shape[0] == 5
    back = _trainer(tmp_path, rounds=3, checkpoint_every=1, feature_log_size=5)
    assert back.restore()
    np.testing.assert_array_equal(back._features_log.h, tr._features_log.h)
    assert back._features_log.seen == 12


def test_probe_is_logged_every_k_rounds(tmp_path):
    probe_recs = [
        dict(r, source=("alpha" if i % 2 else "beta")) for i, r in enumerate(tiny_records(10))
    ]
    tr = _trainer(
        tmp_path, probe_records=probe_recs, rounds=5, probe_every=2, probe_size=6,
        probe_max_new_tokens=3,
    )  # fmt: skip
    rows = tr.run()
    probed = [(m["round"], m["probe"]["after_rounds"]) for m in rows if "probe" in m]
    assert probed == [(1, 0), (3, 2), (5, 4)]
    p = rows[0]["probe"]
    assert p["queries"] == 6 and set(p["reward_by_domain"]) == {"alpha", "beta"}
    assert 1 <= p["mean_active"] <= 2 and 0 <= p["nmi"] <= 1
    assert set(p["familiarity_by_domain"]) == {"alpha", "beta"}
    assert all(len(v) == 2 for v in p["familiarity_by_domain"].values())
    assert 0 < p["tokens_per_query"] <= 3 and p["failed"] == 0
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert line["probe"]["macro_reward"] == p["macro_reward"]
