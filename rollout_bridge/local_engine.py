"""The in-process rollout engine: the JAX sampler with stacked multi-agent LoRA.

The CPU default. ``publish`` writes one agent's adapter into its slot of the stacked
``LoRAWeights`` (no files, no copies of the backbone), so a single sampler batch can mix
agents; ``generate`` expands each request into ``n`` rows, groups rows that share a token
budget and stop set, and runs them in batches of at most ``max_batch`` rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from coevo_jax.lora import AgentLoRA, LoRAWeights, set_agent
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.sampler import generate as sample
from rollout_bridge.engine import GenerationRequest, Trajectory


def row_seed(seed: int, sample_index: int) -> int:
    """The sampler seed of sample ``j`` of a request: a fixed 32-bit mix of (seed, j)."""
    return int((int(seed) * 2654435761 + (sample_index + 1) * 40503) % (2**31 - 1))


class InProcessEngine:
    """Serves N agents' adapters over one backbone held in this process.

    Args:
      params: decoder params (frozen backbone).
      cfg: its ModelConfig.
      lora: stacked adapters giving the agent slots (their current values are what is served
        until ``publish`` replaces a slot).
      eos_ids: ids that always end a completion.
      pad_id: padding id.
      max_batch: rows per sampler call.
      compute_dtype: sampler compute dtype.
    """

    def __init__(
        self,
        params: Any,
        cfg: ModelConfig,
        lora: LoRAWeights | None,
        *,
        eos_ids: Sequence[int],
        pad_id: int = 0,
        max_batch: int = 64,
        compute_dtype: Any = jnp.float32,
    ):
        self.params = params
        self.cfg = cfg
        self.lora = lora
        self.eos_ids = tuple(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.max_batch = int(max_batch)
        self.compute_dtype = compute_dtype
        self.versions: dict[int, int] = {}
        self.tokens_generated = 0

    def publish(self, agent_id: int, adapters: AgentLoRA, version: int) -> None:
        if self.lora is None:
            raise ValueError("this engine was built without LoRA slots")
        if not 0 <= agent_id < self.lora.n_agents:
            raise IndexError(f"agent {agent_id} out of range for {self.lora.n_agents} slots")
        self.lora = set_agent(self.lora, agent_id, adapters)
        self.versions[agent_id] = int(version)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Trajectory]:
        rows: list[tuple[GenerationRequest, int]] = [(r, j) for r in requests for j in range(r.n)]
        groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        for k, (r, _) in enumerate(rows):
            groups.setdefault((r.max_tokens, tuple(sorted(set(r.stop_ids)))), []).append(k)
        out: list[Trajectory | None] = [None] * len(rows)
        for (max_tokens, stops), idx in groups.items():
            for start in range(0, len(idx), self.max_batch):
                chunk = idx[start : start + self.max_batch]
                t0 = time.perf_counter()
                lora = None
                if self.lora is not None:
                    agent_ids = jnp.asarray([rows[k][0].agent_id for k in chunk], jnp.int32)
                    lora = (self.lora, agent_ids)
                res = sample(
                    self.params,
                    self.cfg,
                    [list(rows[k][0].prompt_ids) for k in chunk],
                    max_new_tokens=max_tokens,
                    temperature=[rows[k][0].temperature for k in chunk],
                    top_p=[rows[k][0].top_p for k in chunk],
                    seeds=[row_seed(rows[k][0].seed, rows[k][1]) for k in chunk],
                    stop_ids=tuple(self.eos_ids) + stops,
                    lora=lora,
                    pad_id=self.pad_id,
                    compute_dtype=self.compute_dtype,
                )
                dt = time.perf_counter() - t0
                for pos, k in enumerate(chunk):
                    r, j = rows[k]
                    self.tokens_generated += len(res.tokens[pos])
                    out[k] = Trajectory(
                        prompt_ids=tuple(r.prompt_ids),
                        completion_ids=tuple(int(t) for t in res.tokens[pos]),
                        logprobs=tuple(float(x) for x in np.asarray(res.logprobs[pos], np.float32)),
                        finish_reason=res.finish_reasons[pos],
                        agent_id=r.agent_id,
                        version=self.versions.get(r.agent_id, 0),
                        query_id=r.query_id,
                        sample_index=j,
                        seconds=dt,
                    )
        return [t for t in out if t is not None]

    def close(self) -> None:
        self.lora = None
