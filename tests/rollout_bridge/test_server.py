"""The server backend: concurrent completion calls for different adapters share one sampler
call, and every call's samples are the same as when it is served alone."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollout_bridge.server as server_mod
from coevo_jax.lora import LoRAConfig, export_peft, init_lora, unstack
from coevo_jax.models import ModelConfig, init_params
from coevo_jax.models.sampler import generate as sample
from rollout_bridge.local_engine import row_seed
from rollout_bridge.server import ServerBackend
from tests.rollout_bridge._tiny import HF_CONFIG

BODIES = [
    {"model": "a0", "prompt": [[5, 6, 7, 8], [9, 10]], "n": 2, "seed": 11},
    {"model": "a1", "prompt": [[3, 4, 5, 6, 7, 8, 9]], "n": 3, "seed": 12, "temperature": 0.7},
    {"model": "tiny", "prompt": [4, 4, 4], "n": 1, "seed": 13, "top_p": 0.9},
]
COMMON = {"max_tokens": 6, "logprobs": 0, "return_token_ids": True}


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig.from_hf_dict(HF_CONFIG)
    return init_params(cfg, jax.random.PRNGKey(0)), cfg


@pytest.fixture(scope="module")
def adapter_dirs(model, tmp_path_factory):
    params, _ = model
    d = tmp_path_factory.mktemp("adapters")
    w = init_lora(jax.random.PRNGKey(3), LoRAConfig(n_agents=2, rank=4, alpha=8), params)
    rng = np.random.default_rng(4)  # numpy: no per-shape compile of a random op
    w = w.replace(
        params=jax.tree.map(
            lambda x: jnp.asarray(0.3 * rng.normal(size=x.shape), jnp.float32), w.params
        )
    )
    return [export_peft(unstack(w, a), None, d / f"a{a}", base_model="tiny") for a in range(2)]


def _backend(model, adapter_dirs, wait_s):
    params, cfg = model
    b = ServerBackend(
        params, cfg, model_name="tiny", max_loras=2, max_lora_rank=4, batch_wait_s=wait_s
    )
    for a, path in enumerate(adapter_dirs):
        b.slots.load(f"a{a}", str(path))
    return b


def _choices(resp):
    return [
        (c["token_ids"], c["logprobs"]["token_logprobs"], c["finish_reason"])
        for c in resp["choices"]
    ]


def test_concurrent_calls_share_one_sampler_call_with_unchanged_samples(
    model, adapter_dirs, monkeypatch
):
    calls = []

    def counting_sample(*args, **kw):
        calls.append(len(args[2]))
        return sample(*args, **kw)

    monkeypatch.setattr(server_mod, "sample", counting_sample)

    alone = _backend(model, adapter_dirs, wait_s=0.0)
    expected = [_choices(alone.complete({**body, **COMMON})) for body in BODIES]
    alone.close()
    assert calls == [4, 3, 1]  # served one by one: a sampler call each
    calls.clear()

    shared = _backend(model, adapter_dirs, wait_s=1.0)
    start = threading.Barrier(len(BODIES))
    got = [None] * len(BODIES)

    def call(k):
        start.wait()
        got[k] = _choices(shared.complete({**BODIES[k], **COMMON}))

    threads = [threading.Thread(target=call, args=(k,)) for k in range(len(BODIES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared.close()
    assert calls == [8]  # three calls, three adapters (base included), one sampler batch
    assert shared.batcher.batches == 1
    for g, e in zip(got, expected, strict=True):
        assert [c[0] for c in g] == [c[0] for c in e]
        assert [c[2] for c in g] == [c[2] for c in e]
        for (_, lg, _), (_, le, _) in zip(g, e, strict=True):
            np.testing.assert_allclose(lg, le, atol=1e-5)


def test_samples_follow_the_per_row_seed_formula(model, adapter_dirs):
    """What a call returns is the sampler's output for seeds ``row_seed(seed, k)`` over its
    rows (prompt-major), as before batching existed: seeds carry over between versions."""
    params, cfg = model
    b = _backend(model, adapter_dirs, wait_s=0.0)
    body = {**BODIES[0], **COMMON}
    got = _choices(b.complete(body))
    rows = [p for p in body["prompt"] for _ in range(body["n"])]
    ref = sample(
        params,
        cfg,
        rows,
        max_new_tokens=6,
        seeds=[row_seed(body["seed"], k) for k in range(len(rows))],
        lora=(b.slots.weights, np.zeros(len(rows), np.int32)),
    )
    b.close()
    assert [c[0] for c in got] == ref.tokens
    assert [c[2] for c in got] == ref.finish_reasons


def test_different_budgets_run_as_separate_batches(model, adapter_dirs):
    b = _backend(model, adapter_dirs, wait_s=0.5)
    start = threading.Barrier(2)
    lens = {}

    def call(mt):
        start.wait()
        r = b.complete(
            {
                "model": "a0",
                "prompt": [5, 6],
                "max_tokens": mt,
                "seed": 1,
                "ignore_eos": True,
                "return_token_ids": True,
            }
        )
        lens[mt] = len(r["choices"][0]["token_ids"])

    threads = [threading.Thread(target=call, args=(mt,)) for mt in (3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    b.close()
    assert lens == {3: 3, 5: 5}  # ignore_eos: the full budget, EOS included
    assert b.batcher.batches == 2
