"""The multi-agent policy step: isolation, accumulation, sharding, learning."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.lora.weights import TARGET_MODULES
from coevo_jax.models import forward
from coevo_jax.rl.advantages import group_advantages
from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.logprobs import PolicyBatch, sequence_logprobs
from coevo_jax.rl.train_step import (
    init_policy_state,
    lr_schedule,
    make_policy_step,
    policy_gradients,
)

from ._tiny import CFG, random_batch, tiny_model

RL = RLConfig(
    warmup_steps=2, decay_steps=50, learning_rate=1e-2, compute_dtype="float32", remat=True
)


@functools.cache
def _step(cfg, donate=True):
    # Cached: every test batch has the same shapes, so each config compiles once per session.
    return make_policy_step(CFG, cfg, donate=donate)


@functools.cache
def _grad_fn(cfg):
    return jax.jit(functools.partial(policy_gradients, model_cfg=CFG, rl_cfg=cfg))


def _grads(cfg, lora, params, batch):
    return _grad_fn(cfg)(lora, params, batch, jax.random.key(0))


def _slice(tree, agent, axis):
    return jax.tree.map(lambda x: np.asarray(jnp.take(x, agent, axis=axis)), tree)


def _assert_tree_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_agent_isolation_bit_for_bit():
    params, lora = tiny_model()
    step = _step(RL)
    state = init_policy_state(lora, RL, jax.random.key(3))
    state, _ = step(state, params, random_batch(0, [0, 1, 2, 3, 0, 1, 2, 3]))
    before = jax.device_get(state)
    state, m = step(state, params, random_batch(1, [2, 2, -1, 2, -1, -1, 2, -1]))
    after = jax.device_get(state)
    np.testing.assert_array_equal(np.asarray(m["present"]), [False, False, True, False])
    np.testing.assert_array_equal(np.asarray(after.agent_steps), [1, 1, 2, 1])
    for agent in (0, 1, 3):
        _assert_tree_equal(
            _slice(before.lora.params, agent, 1), _slice(after.lora.params, agent, 1)
        )
        _assert_tree_equal(_slice(before.opt_state, agent, 0), _slice(after.opt_state, agent, 0))
    changed = jax.tree.map(
        lambda x, y: np.abs(np.asarray(x[:, 2]) - np.asarray(y[:, 2])).max(),
        before.lora.params,
        after.lora.params,
    )
    assert all(v > 0 for v in jax.tree.leaves(changed))


def test_per_agent_schedule_counts_own_steps():
    sched = lr_schedule(RL)
    params, lora = tiny_model()
    step = _step(RL)
    state = init_policy_state(lora, RL, jax.random.key(0))
    pad = [-1] * 6
    for seed, agents in enumerate([[0, 0] + pad, [0, 1] + pad, [0, 0] + pad]):
        state, m = step(state, params, random_batch(seed, agents))
    np.testing.assert_array_equal(np.asarray(state.agent_steps), [3, 1, 0, 0])
    # The lr the last update used: agent 0 at its step 2, agent 1 absent (reports its step 1).
    np.testing.assert_allclose(np.asarray(m["lr"])[:2], [float(sched(2)), float(sched(1))])


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_accumulating_four_micro_batches_equals_one_step(loss_type):
    params, lora = tiny_model()
    batch = random_batch(5, [0, 1, 0, 2, 1, 1, 0, 3])
    one = RLConfig(**{**RL.__dict__, "loss_type": loss_type, "micro_batches": 1})
    four = RLConfig(**{**RL.__dict__, "loss_type": loss_type, "micro_batches": 4})
    g1, m1 = _grads(one, lora, params, batch)
    g4, m4 = _grads(four, lora, params, batch)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g4), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    for k in m1:
        np.testing.assert_allclose(np.asarray(m1[k]), np.asarray(m4[k]), rtol=1e-5, atol=1e-7)
    s1, _ = make_policy_step(CFG, one)(
        init_policy_state(lora, one, jax.random.key(0)), params, batch
    )
    s4, _ = make_policy_step(CFG, four)(
        init_policy_state(lora, four, jax.random.key(0)), params, batch
    )
    for a, b in zip(jax.tree.leaves(s1.lora.params), jax.tree.leaves(s4.lora.params), strict=True):
        np.testing.assert_allclose(
            np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5 * RL.learning_rate
        )


def test_length_buckets_give_the_full_width_result():
    """Sorted rows at trimmed widths, and a skipped all-padding micro-batch, change nothing."""
    params, lora = tiny_model()
    batch = random_batch(11, [0, -1, 1, 2, -1, 1, 3, -1], T=8)
    # Short completions everywhere but row 0, so most micro-batches run narrower than T.
    short = np.asarray(batch.completion_mask).copy()
    short[1:, 3:] = 0
    short[5] = 0  # an agent's row with no counted token: its sequence metrics still count it
    batch = batch.replace(completion_mask=jnp.asarray(short))
    # dr_grpo: its denominator is T, which a trimmed micro-batch must not change.
    full = RLConfig(**{**RL.__dict__, "loss_type": "dr_grpo", "micro_batches": 4})
    bucketed = RLConfig(**{**full.__dict__, "length_buckets": 4})
    g1, m1 = _grads(full, lora, params, batch)
    g4, m4 = _grads(bucketed, lora, params, batch)
    # Other rows share each micro-batch, so sums run in another order: accumulation's tolerance.
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g4), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    assert set(m1) == set(m4)
    for k in m1:
        np.testing.assert_allclose(np.asarray(m1[k]), np.asarray(m4[k]), rtol=1e-5, atol=1e-7)


def test_gradients_match_per_agent_losses():
    """Each agent's slice gets exactly d loss_agent, the loss over its own sequences only."""
    params, lora = tiny_model()
    agents = np.array([0, 2, 0, 2, 1, 2, 0, 3])
    batch = random_batch(7, agents)
    g, m = _grads(RL, lora, params, batch)
    g0, m0 = _grads(
        RL, lora, params, batch.replace(agent_ids=jnp.asarray(np.where(agents == 0, 0, -1)))
    )
    np.testing.assert_allclose(float(m["loss"][0]), float(m0["loss"][0]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g0), strict=True):
        np.testing.assert_allclose(np.asarray(a[:, 0]), np.asarray(b[:, 0]), rtol=1e-5, atol=1e-8)
        assert float(jnp.abs(b[:, 1:]).max()) == 0.0


@pytest.mark.parametrize(
    "dtypes",
    [{"compute_dtype": "bfloat16"}, {"compute_dtype": "float32", "matmul_dtype": "bfloat16"}],
    ids=["bf16", "mixed"],
)
def test_bf16_compute_is_close_to_fp32(dtypes):
    params, lora = tiny_model()
    batch = random_batch(2, [0, 1, 2, 3, 0, 1, 2, 3])
    g32, m32 = _grads(RL, lora, params, batch)
    bf = RLConfig(**{**RL.__dict__, **dtypes})
    g16, m16 = _grads(bf, lora, params, batch)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(g16))
    np.testing.assert_allclose(
        np.asarray(m16["loss"]), np.asarray(m32["loss"]), rtol=0.05, atol=0.02
    )
    cos = [
        float(jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b) + 1e-12))
        for a, b in zip(jax.tree.leaves(g16), jax.tree.leaves(g32), strict=True)
        if float(jnp.linalg.norm(b)) > 0
    ]
    assert min(cos) > 0.95


def test_sharded_step_equals_single_device():
    if jax.device_count() < 8:
        pytest.skip("needs 8 (fake) devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    params, lora = tiny_model()
    batch = random_batch(9, [0, 1, 2, 3, 3, 2, 1, 0])
    cfg = RLConfig(**{**RL.__dict__, "micro_batches": 2})
    single_state, single_m = _step(cfg, donate=False)(
        init_policy_state(lora, cfg, jax.random.key(0)), params, batch
    )

    from coevo_jax.parallel import batch_sharding, make_mesh, shard_lora, shard_params

    mesh = make_mesh(data=2, fsdp=4)
    s_params = shard_params(params, mesh)
    s_state = init_policy_state(lora, cfg, jax.random.key(0))
    s_state = s_state.replace(
        lora=s_state.lora.replace(params=shard_lora(s_state.lora.params, mesh))
    )
    s_batch = jax.tree.map(lambda x: jax.device_put(x, batch_sharding(x.shape, mesh)), batch)
    assert len(s_batch.completion_ids.sharding.device_set) == 8
    sharded_state, sharded_m = make_policy_step(CFG, cfg)(s_state, s_params, s_batch)
    for a, b in zip(
        jax.tree.leaves(single_state.lora.params),
        jax.tree.leaves(sharded_state.lora.params),
        strict=True,
    ):
        np.testing.assert_allclose(
            np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5 * cfg.learning_rate
        )
    for k in single_m:
        np.testing.assert_allclose(
            np.asarray(single_m[k]), np.asarray(sharded_m[k]), rtol=1e-5, atol=1e-6
        )


def _sample(params, lora, agent_ids, prompt, n_new, key):
    """Plain ancestral sampling (full forward per token; the test model is tiny)."""
    b = agent_ids.shape[0]
    ids = jnp.broadcast_to(prompt, (b, prompt.shape[0]))

    def body(ids, k):
        logits = forward(params, CFG, ids, lora=(lora, agent_ids)).logits[:, -1]
        tok = jax.random.categorical(k, logits)
        return jnp.concatenate([ids, tok[:, None]], 1), None

    for k in jax.random.split(key, n_new):
        ids, _ = body(ids, k)
    return ids[:, prompt.shape[0] :]


@pytest.mark.slow
def test_gspo_learns_to_emit_the_rewarded_token():
    target, G, T = 7, 16, 4
    params, lora = tiny_model(n_agents=2, modules=TARGET_MODULES)
    cfg = RLConfig(
        warmup_steps=0,
        decay_steps=100,
        learning_rate=2e-2,
        beta=1e-4,
        compute_dtype="float32",
        remat=False,
    )
    prompt = jnp.array([1, 2, 3], jnp.int32)
    agent = jnp.zeros((G,), jnp.int32)
    sample = jax.jit(lambda lo, k: _sample(params, lo, agent, prompt, T, k))
    step = make_policy_step(CFG, cfg)

    def batch_of(comp, lo):
        b = PolicyBatch(
            prompt_ids=jnp.broadcast_to(prompt, (G, 3)),
            prompt_mask=jnp.ones((G, 3), jnp.int32),
            completion_ids=comp,
            completion_mask=jnp.ones((G, T), jnp.int32),
            agent_ids=agent,
            advantages=jnp.zeros((G,)),
        )
        old, _ = jax.jit(
            lambda lo, b: sequence_logprobs(params, CFG, lo, b, compute_dtype=jnp.float32)
        )(lo, b)
        return b.replace(old_logp=old)

    def p_target(lo):
        b = batch_of(jnp.full((G, T), target, jnp.int32), lo)
        return float(jnp.exp(b.old_logp[0]).mean())

    state = init_policy_state(lora, cfg, jax.random.key(0))
    p0 = p_target(state.lora)
    key = jax.random.key(42)
    for _ in range(30):
        key, k = jax.random.split(key)
        comp = sample(state.lora, k)
        rewards = (comp == target).any(-1).astype(jnp.float32)[None]
        b = batch_of(comp, state.lora).replace(advantages=group_advantages(rewards)[0])
        state, _ = step(state, params, b)
    p1 = p_target(state.lora)
    assert p1 > 2 * p0, (p0, p1)
    # Agent 1 never trained: its adapter is what it was.
    _assert_tree_equal(_slice(lora.params, 1, 1), _slice(jax.device_get(state.lora.params), 1, 1))
