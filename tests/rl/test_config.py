"""RLConfig validation and YAML loading."""

import pytest

from coevo_jax._config import ConfigError, from_dict
from coevo_jax.rl.config import RLConfig


def test_defaults_are_the_paper_recipe():
    c = RLConfig()
    assert (c.level, c.loss_type, c.eps_low, c.beta, c.learning_rate, c.warmup_steps) == (
        "sequence",
        "grpo",
        0.2,
        1e-4,
        3e-5,
        600,
    )


def test_from_dict_and_errors():
    c = from_dict(RLConfig, {"loss_type": "dapo", "eps_high": "0.28", "beta": 0})
    assert c.loss_type == "dapo" and c.eps_high == 0.28 and c.beta == 0.0
    with pytest.raises(ConfigError, match="loss_type"):
        from_dict(RLConfig, {"loss_type": "ppo"})
    with pytest.raises(ConfigError, match="bogus"):
        from_dict(RLConfig, {"bogus": 1})
    with pytest.raises(ConfigError, match="decay_steps"):
        from_dict(RLConfig, {"warmup_steps": 10, "decay_steps": 5})


def test_matmul_dtype():
    assert RLConfig().matmul_dtype is None
    c = from_dict(RLConfig, {"compute_dtype": "float32", "matmul_dtype": "bfloat16"})
    assert (c.compute_dtype, c.matmul_dtype) == ("float32", "bfloat16")
    with pytest.raises(ConfigError, match="matmul_dtype"):
        from_dict(RLConfig, {"matmul_dtype": "float8"})
