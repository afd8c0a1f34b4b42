"""The engine self-check: the in-process engine passes; wrong engines fail naming the agent."""

import dataclasses

import jax
import pytest

from coevo_jax.train.selfcheck import EngineMismatch, check_engine
from rollout_bridge.local_engine import InProcessEngine
from tests.rl._tiny import CFG, tiny_model

PROMPTS = [[3, 7, 9, 4], [5, 2, 6], [8, 8, 1, 6, 2, 11]]


@pytest.fixture(scope="module")
def model():
    params, lora = tiny_model(n_agents=3)
    # adapters far enough from the base that serving the wrong one shows
    lora = lora.replace(params=jax.tree.map(lambda x: 6.0 * x, lora.params))
    return params, lora


class Recorder:
    """Records the batches it is asked for, then lets the wrapped engine serve them."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def generate(self, requests):
        self.calls.append([r.agent_id for r in requests])
        return self.engine.generate(requests)


class BaseRowsGetAnAdapter(Recorder):
    """vLLM's hazard 1: base-model rows mixed with LoRA rows are served with an adapter."""

    def generate(self, requests):
        served = [dataclasses.replace(r, agent_id=0) if r.agent_id == -1 else r for r in requests]
        out = super().generate(served)
        base = {r.query_id for r in requests if r.agent_id == -1}
        return [dataclasses.replace(t, agent_id=-1) if t.query_id in base else t for t in out]


class StaleAdapter(Recorder):
    """Agent 2's rows served by a stale adapter (one it was not told about)."""

    def __init__(self, engine, stale):
        super().__init__(engine)
        self.stale = stale

    def generate(self, requests):
        out = super().generate([r for r in requests if r.agent_id != 2])
        return out + self.stale.generate([r for r in requests if r.agent_id == 2])


def test_in_process_engine_passes_with_base_and_agents_in_one_batch(model):
    params, lora = model
    engine = Recorder(InProcessEngine(params, CFG, lora, eos_ids=(1,), pad_id=0))
    report = check_engine(engine, params, CFG, lora, PROMPTS, n_per_agent=2, max_tokens=8)
    assert engine.calls == [[-1, 0, 1, 2] * len(PROMPTS)]  # one call, interleaved
    assert sorted(report.gaps) == [-1, 0, 1, 2]
    assert report.failed == [] and report.requests == 4 * len(PROMPTS)
    for a, g in report.gaps.items():
        assert g["token_abs"] < 1e-4 and g["sequences"] == 2 * len(PROMPTS), (a, g)
    assert set(report.metrics()) == {"base", "0", "1", "2"}


def test_base_rows_served_with_an_adapter_fail_naming_the_base(model):
    params, lora = model
    engine = BaseRowsGetAnAdapter(InProcessEngine(params, CFG, lora, eos_ids=(1,), pad_id=0))
    with pytest.raises(EngineMismatch, match=r"base model: \d\.\d+ nats/token") as err:
        check_engine(engine, params, CFG, lora, PROMPTS, n_per_agent=2, max_tokens=8)
    assert err.value.failed == [-1]
    assert err.value.report.gaps[-1]["token_abs"] > 0.08
    assert all(err.value.report.gaps[a]["token_abs"] < 1e-4 for a in (0, 1, 2))
    assert "max-loras" in str(err.value)
    # without the base in the batch the hazard cannot show: the check passes
    check_engine(
        engine, params, CFG, lora, PROMPTS, n_per_agent=2, max_tokens=8, include_base=False
    )


def test_a_stale_adapter_fails_naming_the_agent(model):
    params, lora = model
    stale_lora = lora.replace(params=jax.tree.map(lambda x: 0.5 * x, lora.params))
    engine = StaleAdapter(
        InProcessEngine(params, CFG, lora, eos_ids=(1,), pad_id=0),
        InProcessEngine(params, CFG, stale_lora, eos_ids=(1,), pad_id=0),
    )
    report = check_engine(
        engine, params, CFG, lora, PROMPTS, n_per_agent=2, max_tokens=8, raise_on_mismatch=False
    )
    assert report.failed == [2], report.gaps
    with pytest.raises(EngineMismatch, match="agent 2: "):
        check_engine(engine, params, CFG, lora, PROMPTS, n_per_agent=2, max_tokens=8)


def test_missing_samples_are_an_error(model):
    params, lora = model

    class Drops(Recorder):
        def generate(self, requests):
            return [t for t in super().generate(requests) if t.agent_id != 1]

    engine = Drops(InProcessEngine(params, CFG, lora, eos_ids=(1,), pad_id=0))
    with pytest.raises(ValueError, match=r"selfcheck:0:1 \(agent 1\) got 0 of 2"):
        check_engine(engine, params, CFG, lora, PROMPTS, n_per_agent=2, max_tokens=8)
    with pytest.raises(ValueError, match="no prompts"):
        check_engine(engine, params, CFG, lora, [])
