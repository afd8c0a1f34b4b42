import jax.numpy as jnp
from flax import nnx

from coevo_jax.router.ablations import BestAgentClassifier, RewardRegressionHead
from coevo_jax.router.config import RouterConfig
from coevo_jax.router.familiarity import FamiliarityHeads
from coevo_jax.router.heads import make_head


def test_config_switch_picks_head_with_common_interface():
    kinds = {
        "familiarity": FamiliarityHeads,
        "regression": RewardRegressionHead,
        "classification": BestAgentClassifier,
    }
    h = jnp.ones((3, 10))
    rbar = jnp.array([[1.0, 0.0, 0.0]] * 3)
    active = jnp.ones((3, 3), bool)
    for name, cls in kinds.items():
        cfg = RouterConfig(n_agents=3, hidden=8, out_dim=4, head=name)
        head = make_head(cfg, 10, rngs=nnx.Rngs(0))
        assert isinstance(head, cls)
        f, _ = head.scores(h, cfg)
        assert f.shape == (3, 3) and bool((f >= 0).all())
        loss, metrics = head.loss(h, rbar, active, cfg)
        assert loss.shape == () and "loss" in metrics
