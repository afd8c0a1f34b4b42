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
from coevo_jax.rl.logprobs import PolicyBatch, sequence_logprobs, token_logprobs
from coevo_jax.rl.losses import LossTerms, k3_kl, policy_loss, policy_loss_terms, reduce_terms
from coevo_jax.rl.penalties import soft_overlong_penalty
from coevo_jax.rl.train_step import (
    PolicyState,
    apply_policy_update,
    init_policy_state,
    lr_schedule,
    make_optimizer,
    make_policy_step,
    policy_gradients,
    policy_step,
)

__all__ = [
    "LossTerms",
    "PolicyBatch",
    "PolicyState",
    "apply_policy_update",
    "init_policy_state",
    "lr_schedule",
    "make_optimizer",
    "make_policy_step",
    "policy_gradients",
    "policy_step",
    "sequence_logprobs",
    "token_logprobs",
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
