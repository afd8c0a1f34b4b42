"""Co-evolution on a controlled task: the router learns to send each domain to its agent."""

import numpy as np
import pytest

from coevo_jax._config import from_dict
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.loop import Trainer
from tests.train._tiny import tiny_backbone


def _records():
    recs = []
    for i in range(16):
        recs.append(
            {"id": f"a{i}", "class": "math", "problem": f"AAAA alpha {i} " * 3, "true_answer": "0"}
        )
        recs.append(
            {
                "id": f"b{i}",
                "class": "reasoning",
                "problem": f"zzzz omega {i} " * 3,
                "true_answer": "0",
            }
        )
    return recs


def scripted_reward(records, completions, agents):
    """Agent 0 solves the math domain, agent 1 the reasoning domain, by construction."""
    return [float((r["class"] == "math") == (a == 0)) for r, a in zip(records, agents, strict=True)]


@pytest.mark.slow
def test_router_learns_domain_to_agent_mapping(tmp_path):
    cfg = from_dict(
        TrainConfig,
        {
            "lora": {"n_agents": 2, "rank": 2, "alpha": 4, "dropout": 0.0},
            "rl": {"compute_dtype": "float32", "remat": False},
            "router": {
                "n_agents": 2,
                "hidden": 32,
                "out_dim": 16,
                "max_prompt_tokens": 64,
                "lr": 3e-3,
                "c_ucb": 0.5,
                "w_ent": 0.0,
            },
            "data": {"max_input_tokens": 64},
            "rollout": {"group_size": 2, "max_new_tokens": 2},
            # no policy steps: this test is about the router's co-evolution with fixed skills
            "loop": {
                "rounds": 40,
                "queries_per_round": 8,
                "groups_per_step": 10_000,
                "checkpoint_every": 0,
                "plot_every": 0,
            },
        },
    )
    recs = _records()
    tr = Trainer(
        cfg,
        tmp_path,
        backbone=tiny_backbone(seed=3),
        records=recs,
        reward_fn=scripted_reward,
        progress=False,
    )
    rows = tr.run()
    # exploration kept both agents fed
    per_agent = np.sum([m["activated"]["per_agent"] for m in rows], axis=0)
    assert per_agent.min() > 0.2 * per_agent.sum()
    # inference routing (exploration off): most familiar activated agent per query
    import jax.numpy as jnp

    from coevo_jax.router import features, pad_queries, route

    prompts = [tr._router_prompt(i) for i in range(len(recs))]
    ids, mask = pad_queries(prompts, max_len=64, pad_id=0)
    h = features(
        tr.system.backbone.params, tr.system.backbone.cfg, jnp.asarray(ids), jnp.asarray(mask), max_len=64
    )
    dec = route(tr.system.router, h, train=False)
    f = np.asarray(dec.f)
    chosen = np.where(np.asarray(dec.active), f, -1).argmax(axis=1)
    gold = np.array([0 if r["class"] == "math" else 1 for r in recs])
    accuracy = float((chosen == gold).mean())
    assert accuracy > 0.9, (accuracy, f[:4])
    assert f[gold == 0, 0].mean() > f[gold == 0, 1].mean()
    assert f[gold == 1, 1].mean() > f[gold == 1, 0].mean()
    tr.close()
