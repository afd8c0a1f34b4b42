"""``loop.async_rollouts``: round r+1 generates while round r trains (``train.pipeline``).

An engine that sleeps and a policy step that sleeps stand in for a slow server and a slow
step, so the overlap shows in wall time whatever the CPU: a round takes about the longer of
the two, not their sum. Staleness stays within ``rollout.max_staleness``, and a run stopped
with a round in flight resumes to the uninterrupted run's metrics.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from coevo_jax._config import from_dict, to_dict
from coevo_jax.train.config import TrainConfig
from tests.train._tiny import reward_has_digit_char, tiny_config, tiny_trainer

SLEEP = 1.5


class SleepyEngine:
    """An engine whose ``generate`` takes ``SLEEP`` seconds longer (a slow server)."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, requests):
        time.sleep(SLEEP)
        return self.inner.generate(requests)

    def publish(self, *args, **kwargs):
        return self.inner.publish(*args, **kwargs)

    def close(self):
        self.inner.close()


def _cfg(async_rollouts: bool, **loop) -> TrainConfig:
    d = to_dict(tiny_config(**loop))
    d["loop"]["async_rollouts"] = async_rollouts
    d["loop"]["groups_per_step"] = 1
    d["rollout"]["max_staleness"] = 1
    return from_dict(TrainConfig, d)


def _slow_trainer(cfg, run_dir):
    tr = tiny_trainer(cfg, run_dir)
    for g in tr.system.groups:
        g.engine = SleepyEngine(g.engine)
    step = tr._policy_steps

    def slow_step(*args, **kwargs):
        time.sleep(SLEEP)
        return step(*args, **kwargs)

    tr._policy_steps = slow_step
    return tr


def test_a_round_takes_the_longer_of_generating_and_training(tmp_path):
    medians = {}
    for name, on in (("sync", False), ("async", True)):
        tr = _slow_trainer(_cfg(on, rounds=5), tmp_path / name)
        try:
            rows = tr.run()
        finally:
            tr.close()
        medians[name] = float(np.median([r["timings"]["round_s"] for r in rows[1:]]))
    # sync pays both sleeps every round, async about one of them
    assert medians["sync"] > 2 * SLEEP
    assert medians["async"] < 0.75 * medians["sync"], medians


def test_staleness_stays_within_the_cap_and_the_overlap_shows_in_it(tmp_path):
    tr = tiny_trainer(_cfg(True, rounds=5), tmp_path)
    try:
        rows = tr.run()
    finally:
        tr.close()
    stale = [m["staleness"] for r in rows for m in r["policy"]["per_agent"].values()]
    assert stale and max(stale) <= 1
    assert 1 in stale  # groups sampled before the previous step did train
    assert sum(rows[-1]["updates"]) > 0


def _metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "timings"} for r in rows]


def test_a_run_stopped_with_a_round_in_flight_resumes_exactly(tmp_path):
    cfg = _cfg(True, rounds=4, checkpoint_every=2, keep_checkpoints=3)
    whole = tiny_trainer(cfg, tmp_path / "whole")
    try:
        whole.run()
    finally:
        whole.close()

    calls = []

    def crash_in_round_3(records, completions, agents):
        calls.append(1)
        if len(calls) == 3:  # round 3's rewards: its rollouts were in flight at the checkpoint
            raise RuntimeError("killed")
        return reward_has_digit_char(records, completions, agents)

    first = tiny_trainer(cfg, tmp_path / "stopped", reward_fn=crash_in_round_3)
    with pytest.raises(RuntimeError, match="killed"):
        first.run()
    first.close()
    ckpts = tmp_path / "stopped" / "checkpoints"
    assert (ckpts / "pending_000002.pkl").is_file()
    assert json.loads((ckpts / "round_000002" / "state.json").read_text())["pending"]

    again = tiny_trainer(cfg, tmp_path / "stopped")
    try:
        assert again.restore() and again.round == 2
        again.run()
    finally:
        again.close()
    assert _metrics(tmp_path / "stopped") == _metrics(tmp_path / "whole")
