"""The trainer's recompute of the engine's behaviour log-probs, per agent group."""

import dataclasses

import jax
import numpy as np
import pytest

from coevo_jax.rl.config import RLConfig
from coevo_jax.train.buffers import Group
from coevo_jax.train.gap import group_gaps
from rollout_bridge.engine import GenerationRequest
from rollout_bridge.local_engine import InProcessEngine
from tests.rl._tiny import CFG, tiny_model

RL = RLConfig(compute_dtype="float32")
PROMPTS = [[3, 7, 9, 4], [5, 2], [8, 8, 1, 6, 2, 11]]
T = 8


def _groups(engine, agents, *, temperature=1.0, top_p=1.0, g=3):
    reqs = [
        GenerationRequest(
            prompt_ids=tuple(p),
            agent_id=a,
            n=g,
            max_tokens=T,
            temperature=temperature,
            top_p=top_p,
            seed=10 * i + a,
            query_id=f"{i}:{a}",
        )
        for i, p in enumerate(PROMPTS)
        for a in agents
    ]
    by = {}
    for t in engine.generate(reqs):
        by.setdefault(t.query_id, []).append(t)
    out = []
    for r in reqs:
        ts = sorted(by[r.query_id], key=lambda t: t.sample_index)
        out.append(
            Group(
                agent_id=r.agent_id,
                query_id=r.query_id,
                prompt_ids=r.prompt_ids,
                completions=tuple(t.completion_ids for t in ts),
                logprobs=tuple(t.logprobs for t in ts),
                rewards=(0.0,) * g,
                version=0,
            )
        )
    return out


@pytest.fixture(scope="module")
def model():
    params, lora = tiny_model(n_agents=3)
    engine = InProcessEngine(params, CFG, lora, eos_ids=(1,), pad_id=0)
    return params, lora, engine


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_in_process_engine_gap_is_zero_for_every_agent_and_the_base(model, temperature):
    params, lora, engine = model
    groups = _groups(engine, [-1, 0, 1, 2], temperature=temperature)
    gaps = group_gaps(
        groups, params, lora, CFG, RL, completion_len=T, pad_id=0, temperature=temperature
    )
    assert sorted(gaps) == [-1, 0, 1, 2]
    for a, g in gaps.items():
        assert g["sequences"] == len(PROMPTS) * 3, a
        assert g["tokens"] == sum(len(c) for x in groups if x.agent_id == a for c in x.completions)
        assert g["token_abs"] < 1e-4, (a, g)
        assert g["seq_absmax"] < 1e-4, (a, g)


def test_gap_sees_a_wrong_temperature_and_a_wrong_adapter(model):
    params, lora, engine = model
    groups = _groups(engine, [0, 1], temperature=0.7)
    wrong_t = group_gaps(groups, params, lora, CFG, RL, completion_len=T, pad_id=0, temperature=1.0)
    assert all(g["token_abs"] > 0.05 for g in wrong_t.values()), wrong_t
    # agent 1's samples scored as agent 0's: only agent 1 (now filed under 0) moves
    swapped = [dataclasses.replace(x, agent_id=0) if x.agent_id == 1 else x for x in groups]
    right = group_gaps(groups, params, lora, CFG, RL, completion_len=T, pad_id=0, temperature=0.7)
    mixed = group_gaps(swapped, params, lora, CFG, RL, completion_len=T, pad_id=0, temperature=0.7)
    assert right[0]["token_abs"] < 1e-4 and right[1]["token_abs"] < 1e-4
    assert mixed[0]["token_abs"] > 10 * right[0]["token_abs"] + 1e-3


def test_chunking_gives_the_same_gap(model):
    params, lora, engine = model
    groups = _groups(engine, [0, 1, 2])
    lora_scaled = lora.replace(params=jax.tree.map(lambda x: 1.1 * x, lora.params))
    kw = dict(completion_len=T, pad_id=0)
    whole = group_gaps(groups, params, lora_scaled, CFG, RL, rows_per_batch=64, **kw)
    split = group_gaps(groups, params, lora_scaled, CFG, RL, rows_per_batch=4, **kw)
    assert whole.keys() == split.keys()
    for a in whole:
        assert whole[a]["token_abs"] > 1e-3  # the scaled adapter is not the engine's
        for k in whole[a]:
            np.testing.assert_allclose(whole[a][k], split[a][k], rtol=1e-5, atol=1e-7)


def test_no_groups_no_gap(model):
    params, lora, _ = model
    assert group_gaps([], params, lora, CFG, RL, completion_len=T, pad_id=0) == {}


def _loop_run(tmp_path, **rl):
    from tests.train._tiny import tiny_config, tiny_trainer

    cfg = tiny_config(rounds=2)
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, **rl))
    tr = tiny_trainer(cfg, tmp_path)
    rows = tr.run()
    tr.close()
    return rows


@pytest.mark.slow
def test_loop_logs_about_zero_gap_with_the_in_process_engine(tmp_path):
    from coevo_jax.train.metrics import read_metrics

    rows = _loop_run(tmp_path)
    assert read_metrics(tmp_path)[-1]["gap"] == rows[-1]["gap"]
    for m in rows:
        sampled = {str(a) for a, n in enumerate(m["activated"]["per_agent"]) if n}
        assert set(m["gap"]) == sampled, m["gap"]
        for g in m["gap"].values():
            assert g["tokens"] > 0 and g["token_abs"] < 1e-4 and g["seq_absmax"] < 1e-4, g
    # the second round's samples come from stepped adapters: the recompute followed them
    assert rows[-1]["updates"] != [0, 0]
    assert (tmp_path / "plots" / "logprob_gap.png").is_file()


@pytest.mark.slow
def test_loop_recompute_mode_weights_are_one_and_gap_can_be_off(tmp_path):
    rows = _loop_run(tmp_path, behavior_logprobs="recompute", is_cap=2.0, measure_gap=False)
    assert all(m["gap"] is None for m in rows)
    stepped = [pa for m in rows for pa in m["policy"]["per_agent"].values()]
    assert stepped
    for pa in stepped:  # exact engine: every sequence weight is exp(~0) = 1, the ratio 1
        assert abs(pa["is_weight"] - 1.0) < 1e-4 and abs(pa["ratio"] - 1.0) < 1e-6, pa
    assert not (tmp_path / "plots" / "logprob_gap.png").exists()
