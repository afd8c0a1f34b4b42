"""Text-level LLM calls over a rollout engine (``coevo_jax.text_llm.TextLLM``).

The orchestrators speak in user messages and agent names; this adapter applies the chat
template, tokenises, calls the engine and decodes the completions.

A prompt is never cut: one whose templated length exceeds its budget raises
:class:`PromptTooLongError` before anything is generated. The budget of a request is the
model's context length minus the request's ``max_tokens`` (room for the completion), capped by
``max_prompt_tokens`` when given. Callers that must fit (the FlyRoute router) size their prompt
with :meth:`EngineTextLLM.count_tokens` and :meth:`EngineTextLLM.prompt_budget`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coevo_jax.text_llm import TextRequest
from rollout_bridge.engine import Engine, GenerationRequest


class PromptTooLongError(ValueError):
    """A prompt does not fit its token budget; the message names the request and both sizes."""


class EngineTextLLM:
    """``TextLLM`` over an ``Engine`` plus a tokenizer.

    Args:
      engine: the rollout engine.
      tokenizer: ``coevo_jax.models.tokenizer.Tokenizer`` (or anything with
        ``apply_chat_template``, ``encode`` and ``decode``).
      agent_ids: maps agent names to engine agent ids; integer agents pass through, and an
        unknown name is an error. -1 is the base model.
      context_length: the model's context (prompt + completion) in tokens; None: unknown.
      max_prompt_tokens: an extra cap on prompt tokens; None: only the context bounds them.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        agent_ids: Mapping[str, int] | None = None,
        *,
        context_length: int | None = None,
        max_prompt_tokens: int | None = None,
    ):
        for name, v in (
            ("context_length", context_length),
            ("max_prompt_tokens", max_prompt_tokens),
        ):
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"EngineTextLLM: {name} must be a positive integer, got {v!r}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.agent_ids = dict(agent_ids or {})
        self.context_length = context_length
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

    def prompt_budget(self, max_tokens: int) -> int | None:
        """Most prompt tokens (chat template included) a request generating ``max_tokens``
        may have; None when neither a context length nor a cap is known."""
        limits = []
        if self.context_length is not None:
            limits.append(self.context_length - max_tokens)
        if self.max_prompt_tokens is not None:
            limits.append(self.max_prompt_tokens)
        return min(limits) if limits else None

    def encode_prompt(self, prompt: str) -> tuple[int, ...]:
        """Token ids of ``prompt`` as one user turn with the generation prompt (never cut)."""
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        return tuple(self.tokenizer.encode(text))

    def count_tokens(self, prompt: str) -> int:
        """``len(encode_prompt(prompt))``."""
        return len(self.encode_prompt(prompt))

    def _checked(self, r: TextRequest, i: int) -> tuple[int, ...]:
        ids = self.encode_prompt(r.prompt)
        budget = self.prompt_budget(r.max_tokens)
        if budget is not None and len(ids) > budget:
            raise PromptTooLongError(
                f"request {i} (tag {r.tag!r}, agent {r.agent!r}): the prompt has {len(ids)} "
                f"tokens, over its budget of {budget} (context {self.context_length}, cap "
                f"{self.max_prompt_tokens}, max_tokens {r.max_tokens}); shorten the prompt, "
                "prompts are not truncated"
            )
        return ids

    def complete(self, requests: Sequence[TextRequest]) -> list[str]:
        ids = [self._checked(r, i) for i, r in enumerate(requests)]
        gen = [
            GenerationRequest(
                prompt_ids=ids[i],
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
