"""coevo_jax.parallel.rules: a rule for every parameter of every family, divisibility fallback."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from coevo_jax.models import ModelConfig, init_params, param_shapes
from coevo_jax.parallel import fit_spec, make_mesh, param_specs, shard_lora, shard_params, spec_for
from tests.helpers import tiny_model_config


def _cfg(family: str, **kw) -> ModelConfig:
    return tiny_model_config(family, **kw)


@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3"])
@pytest.mark.parametrize("tied", [False, True])
def test_every_parameter_has_a_rule(family, tied):
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    shapes = param_shapes(_cfg(family, tie_word_embeddings=tied))
    arrays = jax.tree.map(np.empty, shapes, is_leaf=lambda s: isinstance(s, tuple))
    specs = param_specs(arrays, mesh)
    assert specs["layers"]["q"] == P(None, "fsdp", "tensor")
    assert specs["layers"]["down"] == P(None, "tensor", "fsdp")
    assert specs["embed"] == P(("fsdp", "tensor"))
    assert specs["layers"]["attn_norm"] == P()
    if family == "qwen3":
        assert specs["layers"]["q_norm"] == P()
    assert ("lm_head" in specs) != tied


def test_unknown_parameter_is_an_error_and_indivisible_axes_are_dropped():
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    with pytest.raises(KeyError, match="no partition rule for parameter 'layers/bias'"):
        spec_for("layers/bias", (2, 4), mesh)
    assert fit_spec(P(None, "fsdp", "tensor"), (2, 3, 8), mesh) == P(None, None, "tensor")
    assert fit_spec(P(("data", "fsdp")), (2, 5), mesh) == P("data")
    assert fit_spec(P(("data", "fsdp")), (4, 5), mesh) == P(("data", "fsdp"))


def test_shard_params_keeps_values_and_lora_is_replicated():
    mesh = make_mesh(data=1, fsdp=4, tensor=2)
    params = init_params(_cfg("llama"), jax.random.key(0))
    sharded = shard_params(params, mesh)
    for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert sharded["layers"]["up"].addressable_shards[0].data.shape == (2, 8, 32)
    lora = shard_lora({"q": {"A": np.ones((2, 3, 32, 4)), "B": np.ones((2, 3, 4, 32))}}, mesh)
    assert lora["q"]["A"].sharding.spec == P()
