"""The mesh splits the work: per-device FLOPs of the programs the trainer itself calls.

Equal numbers cannot show a split (a step that computes every row on every device gives
the same results), so these tests compile, on the 8 fake CPU devices of tests/conftest.py,
the very functions a mesh System holds (``group.step_fn``, the router features, the router
step, the trainer's log-prob recompute) and compare their per-device FLOPs with the
one-device System's: at most 1/N + 10 %.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from coevo_jax._config import from_dict, to_dict
from coevo_jax.models import init_params
from coevo_jax.rl.logprobs import PolicyBatch
from coevo_jax.router import features, pad_queries, router_step
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.distributed import under_mesh
from coevo_jax.train.setup import Backbone
from coevo_jax.train.system import System
from tests.helpers import tiny_model_config
from tests.train._tiny import CharTokenizer, tiny_config

ROWS, PROMPT, COMPLETION, MICRO = 64, 16, 32, 8
LIMIT = 1 / 8 * 1.1


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"])


def _cfg(parallel: dict) -> TrainConfig:
    base = to_dict(tiny_config())
    base["rl"] |= {"micro_batches": MICRO, "beta": 1e-3}  # beta > 0: the reference pass runs
    base["lora"]["target_modules"] = ["q", "k", "v", "o", "gate", "up", "down"]
    base["loop"]["queries_per_round"] = 16
    return from_dict(TrainConfig, {**base, "parallel": parallel})


def _backbone() -> Backbone:
    """A Qwen3-shaped decoder wider than the loop tests' one, so the rows' work dominates
    the replicated adapters' optimizer update (which no mesh splits)."""
    cfg = tiny_model_config("qwen3", vocab_size=256, hidden_size=128, intermediate_size=256,
                            num_heads=8, num_kv_heads=4, head_dim=16, tie_word_embeddings=True)  # fmt: skip
    return Backbone(init_params(cfg, jax.random.PRNGKey(0)), cfg, CharTokenizer())


def _batch(vocab: int) -> PolicyBatch:
    rng = np.random.default_rng(0)
    return PolicyBatch(
        prompt_ids=rng.integers(3, vocab, (ROWS, PROMPT)).astype(np.int32),
        prompt_mask=np.ones((ROWS, PROMPT), np.int32),
        completion_ids=rng.integers(3, vocab, (ROWS, COMPLETION)).astype(np.int32),
        completion_mask=np.ones((ROWS, COMPLETION), np.int32),
        agent_ids=(np.arange(ROWS) % 2).astype(np.int32),
        advantages=rng.normal(size=ROWS).astype(np.float32),
        old_logp=np.full((ROWS, COMPLETION), -3.0, np.float32),
    )


@functools.cache
def _systems() -> dict[str, System]:
    bb = _backbone()
    return {
        name: System(_cfg(parallel), backbone=bb if name == "one" else _backbone(),
                     engines=[None], warn_dtype=False)  # fmt: skip
        for name, parallel in (("one", {}), ("fsdp", {"fsdp": 8}), ("data_fsdp", {"data": 2, "fsdp": 4}))
    }  # fmt: skip


@functools.cache
def _step_flops(name: str) -> float:
    system = _systems()[name]
    g = system.groups[0]
    batch = system.place_rows(_batch(g.backbone.cfg.vocab_size))
    return _flops(g.step_fn.lower(g.policy, g.backbone.params, batch).compile())


@pytest.mark.parametrize("name", ["fsdp", "data_fsdp"])
def test_policy_step_splits_rows_over_the_mesh(name):
    ratio = _step_flops(name) / _step_flops("one")
    assert ratio <= LIMIT, f"{name}: per-device FLOPs {ratio:.3f} of one device's"


def test_router_features_split_over_the_mesh():
    """The router's partial forward runs on the sharded backbone, rows split (no replica)."""
    prompts = [[5 + (i * 7 + j) % 90 for j in range(24)] for i in range(16)]
    flops = {}
    for name in ("one", "fsdp"):
        system = _systems()[name]
        bb, rc = system.router_backbone, system.cfg.router
        ids, mask = pad_queries(prompts, max_len=rc.max_prompt_tokens, pad_id=0)
        args = (bb.params, bb.cfg, system.place_rows(ids), system.place_rows(mask))
        with under_mesh(system.mesh):  # as System.query_features calls it
            lowered = features.lower(*args, layers=rc.feature_layers, max_len=rc.max_prompt_tokens)
            flops[name] = _flops(lowered.compile())
    assert flops["fsdp"] / flops["one"] <= LIMIT, flops


def test_router_step_splits_rows_over_the_mesh():
    flops = {}
    rng = np.random.default_rng(1)
    rows = 128
    for name in ("one", "fsdp"):
        system = _systems()[name]
        h = system.place_rows(rng.normal(size=(rows, system.feature_dim)).astype(np.float32))
        rbar = system.place_rows(rng.uniform(size=(rows, 2)).astype(np.float32))
        served = system.place_rows(np.ones((rows, 2), bool))
        with under_mesh(system.mesh):
            flops[name] = _flops(router_step.lower(system.router, h, rbar, served).compile())
    assert flops["fsdp"] / flops["one"] <= LIMIT, flops


def test_no_whole_backbone_on_any_device():
    """A mesh System keeps one copy of the backbone, sharded: the embedding's per-device
    shard is 1/8 of it, and the router reads the same arrays as the policy step."""
    system = _systems()["fsdp"]
    emb = system.router_backbone.params["embed"]
    assert len(emb.sharding.device_set) == 8
    assert emb.addressable_shards[0].data.size * 8 == emb.size
    assert system.groups[0].backbone is system.router_backbone
