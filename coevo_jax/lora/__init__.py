"""Multi-agent LoRA: N adapters stacked on one frozen backbone, PEFT-format export/import."""

from coevo_jax.lora.config import LoRAConfig
from coevo_jax.lora.init import AgentLoRA, init_lora, set_agent, stack, unstack
from coevo_jax.lora.merge import merge
from coevo_jax.lora.peft_io import AdapterFormatError, export_peft, import_peft
from coevo_jax.lora.weights import TARGET_MODULES, LoRAWeights, lora_delta

__all__ = [
    "TARGET_MODULES",
    "AdapterFormatError",
    "AgentLoRA",
    "LoRAConfig",
    "LoRAWeights",
    "export_peft",
    "import_peft",
    "init_lora",
    "lora_delta",
    "merge",
    "set_agent",
    "stack",
    "unstack",
]
