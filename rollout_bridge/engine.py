"""The rollout engine interface that the training loop and the orchestrators see (docs/design.md §6).

An engine serves N agents' current LoRA adapters over one or more base models and turns
token-id prompts into trajectories with behaviour log-probs. Implementations:

- ``rollout_bridge.local_engine.InProcessEngine``: the JAX sampler in this process (CPU default).
- ``rollout_bridge.http_engine.HTTPEngine``: vLLM's OpenAI-compatible protocol, to a real vLLM
  server or to ``rollout_bridge.server`` (the project's own).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """One prompt for one agent; the engine returns ``n`` trajectories for it.

    Attributes:
      prompt_ids: prompt token ids (chat template already applied, already left-truncated).
      agent_id: which agent's adapter serves it; -1 is the base model (adapter off).
      n: number of independent samples.
      max_tokens: generation budget per sample.
      temperature: 0 means greedy.
      top_p: nucleus mass in (0, 1].
      seed: per-request seed; sample j uses a key derived from (seed, j).
      stop_ids: token ids that end a sample (the EOS ids are always added by the engine).
      query_id: caller's id, carried into every trajectory and every failure report.
    """

    prompt_ids: tuple[int, ...]
    agent_id: int
    n: int = 1
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: tuple[int, ...] = ()
    query_id: str = ""

    def __post_init__(self):
        if len(self.prompt_ids) == 0:
            raise ValueError(f"request {self.query_id!r}: empty prompt")
        if self.n < 1:
            raise ValueError(f"request {self.query_id!r}: n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.query_id!r}: max_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"request {self.query_id!r}: temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"request {self.query_id!r}: top_p must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One sampled completion.

    Attributes:
      prompt_ids / completion_ids: token ids; completion includes the stop token if one ended it.
      logprobs: behaviour log-prob of each completion token under the sampling distribution
        (after temperature and top-p), float32, same length as ``completion_ids``.
      finish_reason: "stop" (a stop/EOS token) or "length".
      agent_id: the agent that served it.
      version: the adapter version actually served (the policy version for staleness).
      query_id: the request's query id.
      sample_index: j in 0..n-1 within its request.
      seconds: wall time of the call that produced it.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    agent_id: int
    version: int
    query_id: str = ""
    sample_index: int = 0
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class FailedRequest:
    """A request that failed for good: reported to the caller, never turned into reward 0."""

    query_id: str
    agent_id: int
    error: str


class GenerationError(RuntimeError):
    """Raised by ``generate`` when some requests failed for good; carries what did succeed."""

    def __init__(self, failures: Sequence[FailedRequest], trajectories: Sequence[Trajectory]):
        self.failures = list(failures)
        self.trajectories = list(trajectories)
        ids = ", ".join(f.query_id or "?" for f in self.failures[:5])
        super().__init__(f"{len(self.failures)} request(s) failed for good (query ids: {ids})")


@runtime_checkable
class Engine(Protocol):
    """What ``coevo_jax.train`` and the orchestrators need from a rollout server."""

    def publish(self, agent_id: int, adapters: Any, version: int) -> None:
        """Makes ``adapters`` (one agent's LoRA pytree) the served policy of ``agent_id``."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Trajectory]:
        """Samples every request; raises GenerationError listing requests that failed for good."""

    def close(self) -> None:
        """Releases servers, threads and temporary directories."""
