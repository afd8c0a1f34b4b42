"""Text-level LLM calls over a rollout engine (``coevo_jax.orchestrators.llm.TextLLM``).

The orchestrators speak in user messages and agent names; this adapter applies the chat
template, tokenises, calls the engine and decodes the completions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coevo_jax.orchestrators.llm import TextRequest
from rollout_bridge.engine import Engine, GenerationRequest


class EngineTextLLM:
    """``TextLLM`` over an ``Engine`` plus a tokenizer.

    Args:
      engine: the rollout engine.
      tokenizer: ``coevo_jax.models.tokenizer.Tokenizer`` (or anything with
        ``apply_chat_template``, ``encode`` and ``decode``).
      agent_ids: maps agent names to engine agent ids; integer agents pass through, and an
        unknown name is an error. -1 is the base model.
      max_prompt_tokens: prompts are left-truncated to this many tokens.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        agent_ids: Mapping[str, int] | None = None,
        *,
        max_prompt_tokens: int = 1536,
    ):
        self.engine = engine
        self.tokenizer = tokenizer
        self.agent_ids = dict(agent_ids or {})
        self.max_prompt_tokens = max_prompt_tokens
        self.calls = 0

    def _agent(self, agent: str | int) -> int:
        if isinstance(agent, int):
            return agent
        if agent in self.agent_ids:
            return self.agent_ids[agent]
        if agent.lstrip("-").isdigit():
            return int(agent)
        raise KeyError(f"unknown agent {agent!r}; known: {sorted(self.agent_ids)}")

    def encode_prompt(self, prompt: str) -> tuple[int, ...]:
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        ids = self.tokenizer.encode(text)
        return tuple(ids[-self.max_prompt_tokens :])

    def complete(self, requests: Sequence[TextRequest]) -> list[str]:
        gen = [
            GenerationRequest(
                prompt_ids=self.encode_prompt(r.prompt),
                agent_id=self._agent(r.agent),
                n=1,
                max_tokens=r.max_tokens,
                temperature=r.temperature,
                seed=r.seed,
                query_id=f"text{self.calls}:{i}",
            )
            for i, r in enumerate(requests)
        ]
        self.calls += 1
        trajs = self.engine.generate(gen)
        by_id = {t.query_id: t for t in trajs}
        return [
            self.tokenizer.decode(list(by_id[g.query_id].completion_ids), skip_special_tokens=True)
            for g in gen
        ]
