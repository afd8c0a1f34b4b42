import math

import pytest

from coevo_jax._config import ConfigError, from_dict
from coevo_jax.router.config import RouterConfig, check_fallback_invariant


def test_paper_defaults():
    cfg = RouterConfig()
    assert (cfg.n_agents, cfg.hidden, cfg.out_dim) == (4, 512, 256)
    assert (cfg.lam, cfg.tau, cfg.margin, cfg.lr) == (2.0, 0.7, 1.0, 1e-4)
    assert cfg.max_prompt_tokens == 800
    assert 4 * math.exp(-2.0) <= 0.7


def test_fallback_invariant_refused_with_explanation():
    with pytest.raises(ValueError) as e:
        RouterConfig(lam=1.0)  # the paper's lambda sensitivity run: 4 e^-1 = 1.47 > 0.7
    msg = str(e.value)
    assert "1.4715" in msg and "tau = 0.7" in msg
    assert "routed to ALL agents" in msg
    assert "allow_no_fallback" in msg
    assert f"{math.log(4 / 0.7):.4f}" in msg  # the smallest margin that would do


def test_fallback_invariant_escape_hatch_and_boundary():
    assert RouterConfig(lam=1.0, allow_no_fallback=True).lam == 1.0
    check_fallback_invariant(2, math.log(2 / 0.5), 1.0, 0.5 + 1e-12)  # equality passes
    # Top-k routing and ablation heads do not threshold on familiarity: no check.
    assert RouterConfig(lam=1.0, routing="top_k", top_k=2).top_k == 2
    assert RouterConfig(lam=1.0, head="regression").head == "regression"


@pytest.mark.parametrize(
    "bad",
    [
        {"head": "mlp"},
        {"feature_layers": "last"},
        {"routing": "top2"},
        {"top_k": 5},
        {"n_agents": 0},
        {"tau": 0.0},
        {"c_ucb": -1.0},
        {"margin": 0.0},
    ],
)
def test_invalid_values(bad):
    with pytest.raises(ValueError):
        RouterConfig(**bad)


def test_from_dict_names_unknown_key_and_inference_switch():
    with pytest.raises(ConfigError, match="router.lambda"):
        from_dict(RouterConfig, {"lambda": 2.0}, path="router")
    cfg = from_dict(RouterConfig, {"lr": "1e-4", "head": "classification", "c_ucb": 0.2})
    assert cfg.lr == 1e-4 and cfg.explores
    inf = cfg.inference()
    assert (inf.c_ucb, inf.w_ent) == (0.0, 0.0) and not inf.explores


def test_feature_norm_is_checked():
    assert RouterConfig(feature_norm="standardize").feature_norm == "standardize"
    with pytest.raises(ValueError, match="feature_norm must be one of"):
        RouterConfig(feature_norm="zscore")


def test_feature_center_is_a_fraction_of_the_standardizing_mean():
    assert RouterConfig(feature_norm="standardize", feature_center=0.75).feature_center == 0.75
    with pytest.raises(ValueError, match=r"feature_center must be in \[0, 1\]"):
        RouterConfig(feature_norm="standardize", feature_center=1.5)
    with pytest.raises(ValueError, match="needs feature_norm='standardize'"):
        RouterConfig(feature_center=0.5)
    with pytest.raises(ValueError, match="norm_queries must be >= 2"):
        RouterConfig(norm_queries=1)
