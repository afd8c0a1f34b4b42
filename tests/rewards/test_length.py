"""DAPO soft overlong penalty."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.rewards.length import soft_overlong_penalty


def _reference(length, max_length, cache_length):
    start = max_length - cache_length
    if length <= start:
        return 0.0
    if length > max_length:
        return -1.0
    return (start - length) / cache_length


def test_piecewise_values():
    lengths = np.array([0, 10, 12, 13, 14, 16, 20, 25])
    got = soft_overlong_penalty(lengths, max_length=16, cache_length=4)
    want = [_reference(x, 16, 4) for x in lengths]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert got.dtype == jnp.float32 and got.shape == lengths.shape


def test_jit_vmap_and_shapes():
    f = jax.jit(lambda x: soft_overlong_penalty(x, 100, 20))
    x = jnp.arange(0, 130, dtype=jnp.int32).reshape(2, 65)
    out = f(x)
    assert out.shape == (2, 65)
    assert float(out.max()) == 0.0 and float(out.min()) == -1.0
    assert jnp.all(jnp.diff(out, axis=-1) <= 0)  # never rewards length
    v = jax.vmap(lambda row: soft_overlong_penalty(row, 100, 20))(x)
    np.testing.assert_array_equal(np.asarray(v), np.asarray(out))


def test_zero_cache_is_a_hard_limit():
    got = soft_overlong_penalty(jnp.array([0, 10, 11]), 10, 0)
    np.testing.assert_array_equal(np.asarray(got), [0.0, 0.0, -1.0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="cache_length=-1"):
        soft_overlong_penalty(jnp.zeros(3), 10, -1)
    with pytest.raises(ValueError, match="cache_length=11"):
        soft_overlong_penalty(jnp.zeros(3), 10, 11)


def test_one_definition_for_rewards_and_rl():
    from coevo_jax import rewards, rl
    from coevo_jax.rl import penalties

    assert penalties.soft_overlong_penalty is soft_overlong_penalty
    assert rl.soft_overlong_penalty is soft_overlong_penalty
    assert rewards.soft_overlong_penalty is soft_overlong_penalty
