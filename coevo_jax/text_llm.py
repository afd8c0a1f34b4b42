"""The text-level LLM interface: "agent X, answer this prompt".

The test-time orchestrators (EvoChamber, FlyRoute) take any object that satisfies
:class:`TextLLM`; ``rollout_bridge.text.EngineTextLLM`` implements it over a rollout engine
plus a tokenizer (chat template applied there), and tests use scripted stand-ins. It sits in
the bottom layer (docs/design.md §1) so that both ``rollout_bridge`` and the orchestrators
can import it without either depending on the other's internals.

A TextLLM may also offer ``count_tokens(prompt) -> int`` and ``prompt_budget(max_tokens) ->
int | None`` (``EngineTextLLM`` does, from the model's context length). Callers that build
long prompts (the FlyRoute router) fit them to that budget; a TextLLM that has a budget
rejects an over-budget prompt instead of cutting it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class TextRequest:
    """One user-turn prompt for one agent.

    Attributes:
      prompt: the user message (no system prompt; the engine side applies the chat template).
      agent: the agent's name or integer id; what it maps to is the implementation's business.
      max_tokens: generation budget.
      temperature: 0 is greedy.
      seed: sampling seed.
      tag: free-form label for logs and scripted stand-ins (e.g. "reflect", "judge").
    """

    prompt: str
    agent: str | int = 0
    max_tokens: int = 256
    temperature: float = 0.7
    seed: int = 0
    tag: str = ""


@runtime_checkable
class TextLLM(Protocol):
    def complete(self, requests: Sequence[TextRequest]) -> list[str]:
        """Returns one completion text per request, in order."""
