"""The policy step's memory levers (issue #45): ``RLConfig.logprob_chunk``, ``attention``,
``remat`` policies, and the cached ``make_policy_step``. Each gives today's step's result."""

import dataclasses
import functools
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

from coevo_jax._config import ConfigError, from_dict
from coevo_jax.models import init_params
from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.train_step import init_policy_state, make_policy_step, policy_gradients

from ._tiny import CFG, random_batch, tiny_model

RL = RLConfig(
    warmup_steps=2, decay_steps=50, learning_rate=1e-2, compute_dtype="float32", micro_batches=2
)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_config_keys_validate_and_old_yamls_load():
    assert (RL.remat, RL.logprob_chunk, RL.attention) == (True, 0, "xla")
    c = from_dict(RLConfig, {"remat": "dots", "logprob_chunk": 64, "attention": "blockwise"})
    assert (c.remat, c.logprob_chunk, c.attention, c.attention_block) == (
        "dots",
        64,
        "blockwise",
        512,
    )
    for bad in (
        {"remat": "some"},
        {"logprob_chunk": -1},
        {"attention": "flash"},
        {"attention_block": 0},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            from_dict(RLConfig, bad)
    for remat in (True, False, "full", "none", "dots_no_batch"):
        assert from_dict(RLConfig, {"remat": remat}).remat == remat
    paths = sorted(CONFIGS.glob("*.yaml"))
    assert paths
    for path in paths:
        rl = (yaml.safe_load(path.read_text()) or {}).get("rl")
        if rl is not None:
            from_dict(RLConfig, rl)


@functools.cache
def _grads(cfg, chunk_size=None):
    params, lora = tiny_model()
    batch = random_batch(5, [0, 1, 0, 2, 1, 1, 0, 3], T=9)
    fn = jax.jit(
        functools.partial(policy_gradients, model_cfg=CFG, rl_cfg=cfg, chunk_size=chunk_size)
    )
    return jax.device_get(fn(lora, params, batch, jax.random.key(0)))


def _assert_close(a, b, tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        if tol == 0:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "levers, tol",
    [
        # Chunks that hold all of T run the unchunked code: bit-for-bit.
        (dict(logprob_chunk=9), 0),
        (dict(logprob_chunk=16), 0),
        # Chunked head (4 does not divide T = 9): fp32 rounding of the separate products.
        (dict(logprob_chunk=4), 1e-5),
        # Online softmax over 4-key tiles: fp32 summation order.
        (dict(attention="blockwise", attention_block=4), 1e-5),
        (dict(attention="auto", attention_block=4), 1e-5),
        # Remat policies: the same math, XLA fuses differently.
        (dict(remat="dots"), 1e-5),
        (dict(remat="dots_no_batch"), 1e-5),
        (dict(remat="none"), 1e-5),
        (dict(logprob_chunk=4, attention="blockwise", attention_block=4, remat="dots"), 1e-5),
    ],
)
def test_each_lever_gives_todays_gradients_and_metrics(levers, tol):
    """Gradients and per-agent metrics (reference pass included: beta > 0) against the
    default step's."""
    want_g, want_m = _grads(RL)
    got_g, got_m = _grads(dataclasses.replace(RL, **levers))
    _assert_close(got_g, want_g, tol)
    _assert_close(got_m, want_m, tol)


def test_chunk_size_argument_defaults_to_the_config_and_still_overrides_it():
    chunked = dataclasses.replace(RL, logprob_chunk=4)
    _assert_close(_grads(chunked), _grads(RL, chunk_size=4), 0)
    _assert_close(_grads(chunked, chunk_size=0), _grads(RL), 0)


def test_make_policy_step_is_cached_on_its_arguments():
    a = make_policy_step(CFG, dataclasses.replace(RL))
    assert make_policy_step(CFG, dataclasses.replace(RL)) is a
    # chunk_size None resolves to the config's value before the lookup
    assert make_policy_step(CFG, RL, chunk_size=0) is a
    assert make_policy_step(CFG, RL, donate=False) is not a
    assert make_policy_step(CFG, dataclasses.replace(RL, logprob_chunk=4)) is not a
    # unhashable shardings: a working, uncached function each time
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    unhashable = {"state": sh}
    with pytest.raises(TypeError):
        hash(unhashable)
    params, lora = tiny_model()
    state = init_policy_state(lora, RL, jax.random.key(0))
    f = make_policy_step(CFG, RL, donate=False, out_shardings=(None, None))
    assert make_policy_step(CFG, RL, donate=False, out_shardings=(None, None)) is f
    g1 = make_policy_step(CFG, RL, donate=False, in_shardings=[sh, sh, sh])
    g2 = make_policy_step(CFG, RL, donate=False, in_shardings=[sh, sh, sh])
    assert g1 is not g2
    s1, _ = g1(state, params, random_batch(0, [0, 1, 2, 3]))
    s2, _ = make_policy_step(CFG, RL, donate=False)(state, params, random_batch(0, [0, 1, 2, 3]))
    _assert_close(s1.lora.params, s2.lora.params, 0)


def _temp_bytes(cfg, model_cfg, rows=8, prompt=8, completion=64):
    params = jax.eval_shape(lambda k: init_params(model_cfg, k), jax.random.key(0))
    _, lora = tiny_model()
    state = jax.eval_shape(lambda lo: init_policy_state(lo, cfg, jax.random.key(0)), lora)
    b = random_batch(0, [0, 1, 2, 3] * (rows // 4), P=prompt, T=completion)
    batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), b)
    step = make_policy_step(model_cfg, cfg)
    return step.lower(state, params, batch).compile().memory_analysis().temp_size_in_bytes


def test_logprob_chunk_drops_the_whole_vocabulary_logits_from_the_compiled_step():
    """With a 4096-token vocabulary the [8, 64, 4096] fp32 logits (8 MiB) and their
    gradient dominate the step; 8-position chunks keep only [8, 8, 4096] of them live."""
    model_cfg = dataclasses.replace(CFG, vocab_size=4096)
    whole = _temp_bytes(dataclasses.replace(RL, micro_batches=1), model_cfg)
    chunked = _temp_bytes(dataclasses.replace(RL, micro_batches=1, logprob_chunk=8), model_cfg)
    logits = 8 * 64 * 4096 * 4
    assert whole >= logits
    assert chunked < whole - logits, (whole, chunked)
