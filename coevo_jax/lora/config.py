"""LoRA hyperparameters (docs/design.md §3; paper: r=16, alpha=32, dropout 0.05 on all 7 projections)."""

from __future__ import annotations

import dataclasses
import math

from coevo_jax.lora.weights import TARGET_MODULES

# PEFT / vLLM module names of our projection names.
HF_MODULE_NAMES = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Adapters for ``n_agents`` agents on one frozen backbone.

    Attributes:
      n_agents: N, the size of the leading agent axis.
      rank: r.
      alpha: lora_alpha; the scaling is ``alpha / r`` (``alpha / sqrt(r)`` with rslora).
      dropout: dropout on the adapter input, training only.
      target_modules: subset of q, k, v, o, gate, up, down.
      rslora: rank-stabilised scaling.
    """

    n_agents: int = 4
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = TARGET_MODULES
    rslora: bool = False

    def __post_init__(self):
        if self.n_agents < 1:
            raise ValueError(f"n_agents must be >= 1, got {self.n_agents}")
        if self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        bad = [m for m in self.target_modules if m not in TARGET_MODULES]
        if bad or not self.target_modules:
            raise ValueError(
                f"target_modules {list(self.target_modules)} invalid: choose from {list(TARGET_MODULES)}"
            )
        if len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError(f"target_modules has duplicates: {list(self.target_modules)}")

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)
