"""RL core: advantages, dynamic sampling, GSPO/DAPO losses, KL, and the multi-agent policy step.

Every algorithmic piece is a pure function of arrays; ``train_step`` assembles them into one
jitted step over stacked LoRA adapters.
"""

from coevo_jax.rl.advantages import (
    RefillResult,
    dynamic_sampling_mask,
    group_advantages,
    refill_from_lifo,
    refill_informative,
)
from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.losses import LossTerms, k3_kl, policy_loss, policy_loss_terms, reduce_terms
from coevo_jax.rl.penalties import soft_overlong_penalty

__all__ = [
    "LossTerms",
    "RLConfig",
    "RefillResult",
    "dynamic_sampling_mask",
    "group_advantages",
    "k3_kl",
    "policy_loss",
    "policy_loss_terms",
    "reduce_terms",
    "refill_from_lifo",
    "refill_informative",
    "soft_overlong_penalty",
]
