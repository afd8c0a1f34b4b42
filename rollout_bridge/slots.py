"""Adapter slots of a serving process: named PEFT adapters in a fixed stack of LoRA slots.

A server holds ``max_loras`` slots of rank ``max_lora_rank`` on all seven projections. Loading
an adapter pads it to the slot rank with zeros and folds its scale into B (slots carry scale
1), so adapters of different ranks and alphas share one stacked ``LoRAWeights`` and one
sampler batch can mix them. Slot -1 is the base model.
"""

from __future__ import annotations

import threading
from pathlib import Path

import jax.numpy as jnp

from coevo_jax.lora import TARGET_MODULES, AgentLoRA, LoRAWeights, import_peft
from coevo_jax.models.config import ModelConfig


class SlotError(ValueError):
    """Bad adapter name/path or no room; ``status`` is the HTTP code a server should return."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _module_dims(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    h, i = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {
        "q": (h, q),
        "k": (h, kv),
        "v": (h, kv),
        "o": (q, h),
        "gate": (h, i),
        "up": (h, i),
        "down": (i, h),
    }


class AdapterSlots:
    """Name -> slot bookkeeping plus the stacked weights the sampler uses."""

    def __init__(self, cfg: ModelConfig, max_loras: int, max_lora_rank: int):
        if max_loras < 1 or max_lora_rank < 1:
            raise ValueError("max_loras and max_lora_rank must be >= 1")
        self.cfg = cfg
        self.max_loras = max_loras
        self.rank = max_lora_rank
        self.dims = _module_dims(cfg)
        n_layers = cfg.num_layers
        self.weights = LoRAWeights(
            params={
                m: {
                    "A": jnp.zeros((n_layers, max_loras, d_in, max_lora_rank), jnp.float32),
                    "B": jnp.zeros((n_layers, max_loras, max_lora_rank, d_out), jnp.float32),
                }
                for m, (d_in, d_out) in self.dims.items()
            },
            scale=1.0,
            dropout=0.0,
        )
        self.names: dict[str, int] = {}
        self.paths: dict[str, str] = {}
        self.lock = threading.Lock()

    def slot_of(self, name: str) -> int | None:
        return self.names.get(name)

    def load(self, name: str, path: str) -> int:
        with self.lock:
            if name in self.names:
                raise SlotError(f"The lora adapter '{name}' has already been loaded.", 400)
            if not Path(path).is_dir():
                raise SlotError(f"Loading lora {name} failed: no adapter directory at {path}", 404)
            free = sorted(set(range(self.max_loras)) - set(self.names.values()))
            if not free:
                raise SlotError(
                    f"cannot load '{name}': all {self.max_loras} LoRA slots are in use (unload one first)",
                    400,
                )
            try:
                adapter = import_peft(
                    path, qkv_sizes=(self.dims["q"][1], self.dims["k"][1], self.dims["v"][1])
                )
            except ValueError as e:
                raise SlotError(f"Loading lora {name} failed: {e}", 400) from e
            self._write(free[0], adapter, name)
            self.names[name] = free[0]
            self.paths[name] = path
            return free[0]

    def _write(self, slot: int, adapter: AgentLoRA, name: str) -> None:
        params = dict(self.weights.params)
        for m in TARGET_MODULES:
            a_slot = params[m]["A"]
            b_slot = params[m]["B"]
            a_new = jnp.zeros(a_slot.shape[:1] + a_slot.shape[2:], jnp.float32)
            b_new = jnp.zeros(b_slot.shape[:1] + b_slot.shape[2:], jnp.float32)
            if m in adapter.params:
                a, b = adapter.params[m]["A"], adapter.params[m]["B"]
                if (
                    a.shape[0] != self.cfg.num_layers
                    or a.shape[1] != a_slot.shape[2]
                    or b.shape[2] != b_slot.shape[3]
                ):
                    raise SlotError(
                        f"Loading lora {name} failed: {m} has shape {a.shape}/{b.shape}, the model needs "
                        f"[{self.cfg.num_layers}, {a_slot.shape[2]}, r]/[.., r, {b_slot.shape[3]}]"
                    )
                r = a.shape[-1]
                if r > self.rank:
                    raise SlotError(f"LoRA rank {r} is greater than max_lora_rank {self.rank}.")
                a_new = a_new.at[..., :r].set(a)
                b_new = b_new.at[:, :r, :].set(b * adapter.scale)
            params[m] = {"A": a_slot.at[:, slot].set(a_new), "B": b_slot.at[:, slot].set(b_new)}
        self.weights = self.weights.replace(params=params)

    def unload(self, name: str) -> None:
        with self.lock:
            if name not in self.names:
                raise SlotError(f"The lora adapter '{name}' cannot be found.", 404)
            slot = self.names.pop(name)
            self.paths.pop(name, None)
            params = {
                m: {"A": ab["A"].at[:, slot].set(0.0), "B": ab["B"].at[:, slot].set(0.0)}
                for m, ab in self.weights.params.items()
            }
            self.weights = self.weights.replace(params=params)
