import pytest

from coevo_jax._config import ConfigError, from_dict
from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig


def test_defaults_are_the_seed_values():
    c = FlyRouteConfig()
    assert (c.theta, c.alpha, c.beta, c.gamma, c.n_explore) == (0.7, 0.5, 0.5, 0.06, 2)
    assert (c.router_top_k, c.router_truncate_chars, c.min_seed_queries) == (20, 450, 5)


@pytest.mark.parametrize(
    "kw",
    [
        {"theta": 1.5},
        {"beta": -0.1},
        {"alpha": -1.0},
        {"n_explore": -1},
        {"router_top_k": 0},
        {"distill_every": 0},
    ],
)
def test_invalid_values_raise(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        FlyRouteConfig(**kw)


def test_from_dict_unknown_key_names_it():
    with pytest.raises(ConfigError, match="thetta"):
        from_dict(FlyRouteConfig, {"thetta": 0.5})
    assert from_dict(FlyRouteConfig, {"gamma": 0}).gamma == 0.0
