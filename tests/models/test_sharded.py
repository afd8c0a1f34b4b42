"""coevo_jax.models.sharded: the sharded forward equals the single-device one on 8 fake devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.lora.weights import TARGET_MODULES, LoRAWeights
from coevo_jax.models import KVCache, init_params, jit_forward, sharded_forward
from coevo_jax.parallel import make_mesh, shard_params
from tests.helpers import tiny_model_config

CFG = tiny_model_config("qwen3")


def _lora(n_agents: int = 2, rank: int = 2) -> LoRAWeights:
    shapes = init_params(CFG, jax.random.key(0))["layers"]
    out = {}
    for i, m in enumerate(TARGET_MODULES):
        _, d_in, d_out = shapes[m].shape
        ka, kb = jax.random.split(jax.random.key(10 + i))
        out[m] = {
            "A": 0.3 * jax.random.normal(ka, (CFG.num_layers, n_agents, d_in, rank)),
            "B": 0.3 * jax.random.normal(kb, (CFG.num_layers, n_agents, rank, d_out)),
        }
    return LoRAWeights(params=out)


@pytest.mark.parametrize("axes", [(8, 1, 1), (1, 8, 1), (2, 2, 2), (1, 2, 4)])
def test_sharded_forward_equals_single_device(axes):
    params = init_params(CFG, jax.random.key(1), std=0.1)
    rng = np.random.RandomState(0)
    ids = jnp.asarray(rng.randint(0, CFG.vocab_size, (8, 6)))
    mask = np.ones((8, 6), np.int32)
    mask[::2, :2] = 0
    mask = jnp.asarray(mask)
    lora = (_lora(), jnp.asarray([0, 1, -1, 0, 1, -1, 0, 1]))
    ref = jit_forward(params, CFG, ids, mask, lora=lora, hidden_layers=(1,))
    mesh = make_mesh(*axes)
    out = sharded_forward(
        shard_params(params, mesh), CFG, ids, mask, mesh=mesh, lora=lora, hidden_layers=(1,)
    )
    assert len(out.logits.sharding.device_set) == 8
    np.testing.assert_allclose(np.asarray(out.logits), np.asarray(ref.logits), atol=1e-5, rtol=0)
    np.testing.assert_allclose(
        np.asarray(out.hidden_states[1]), np.asarray(ref.hidden_states[1]), atol=1e-5, rtol=0
    )


def test_sharded_forward_with_kv_cache():
    params = init_params(CFG, jax.random.key(2), std=0.1)
    ids = jnp.asarray(np.random.RandomState(1).randint(0, CFG.vocab_size, (4, 5)))
    cache_mask = jnp.ones((4, 8), jnp.int32)
    cache = KVCache.init(CFG, 4, 8)
    ref = jit_forward(params, CFG, ids, cache_mask, cache=cache, cache_index=0)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    out = sharded_forward(params, CFG, ids, cache_mask, mesh=mesh, cache=cache, cache_index=0)
    np.testing.assert_allclose(np.asarray(out.logits), np.asarray(ref.logits), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(out.cache.k), np.asarray(ref.cache.k), atol=1e-5, rtol=0)


@pytest.mark.parametrize("explicit", [False, True])
def test_forward_inside_shard_map_over_the_data_axis(explicit):
    # Inside shard_map the mesh axes are Manual, so the residual stream's batch pin must
    # step aside; it used to raise "can only refer to Auto axes" (Auto and Explicit meshes).
    from jax.sharding import PartitionSpec as P

    from coevo_jax.models import forward

    params = init_params(CFG, jax.random.key(3), std=0.1)
    ids = jnp.asarray(np.random.RandomState(2).randint(0, CFG.vocab_size, (8, 6)))
    mask = jnp.ones((8, 6), jnp.int32)
    agents = jnp.asarray([0, 1, -1, 0, 1, -1, 0, 1])
    weights = _lora()
    ref = jit_forward(params, CFG, ids, mask, lora=(weights, agents))
    # Two devices, so each shard keeps 4 rows: the pin only applies to a divisible batch.
    two = jax.devices()[:2]
    if explicit:
        kind = (jax.sharding.AxisType.Explicit,)
        mesh = jax.make_mesh((2,), ("data",), axis_types=kind, devices=two)
    else:
        mesh = make_mesh(data=2, fsdp=1, devices=two)

    def local(params, weights, ids, mask, agents):
        return forward(params, CFG, ids, mask, lora=(weights, agents)).logits

    specs = (P(), P(), P("data"), P("data"), P("data"))
    args = [
        jax.device_put(a, jax.sharding.NamedSharding(mesh, s))
        for a, s in zip((params, weights, ids, mask, agents), specs, strict=True)
    ]
    sharded = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("data"))
    logits = jax.jit(sharded)(*args)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ref.logits), atol=1e-5, rtol=0)
