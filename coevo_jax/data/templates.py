"""Zero-shot, role-free prompt templates (the CERA-MoA paper, "Figure 4"; docs/design.md §9).

A prompt is the raw problem plus one output-format line for its class; no system prompt,
no persona, no few-shot examples. The line is the class's ``Domain.format`` in the domain
registry (``coevo_jax.data.domains``); for the built-in classes:

- math, reasoning: the final answer in ``\\boxed{}``;
- code: one fenced python block, naming the function to write (call-form and assert-form
  tasks) or stating the stdin/stdout contract;
- if: the prompt exactly as the source wrote it (its constraints are the format).

:func:`render_chat` wraps the prompt as a single user turn in the tokenizer's chat template
(thinking off where the template has it; see ``coevo_jax.models.tokenizer.Tokenizer``) and
left-truncates to the input limit (800 tokens in the paper). Truncation cuts the start of the
problem and keeps the template's header and the format line, so a truncated prompt is still
a well-formed turn that says how to answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from coevo_jax.data import domains
from coevo_jax.data.domains import (  # noqa: F401  (their old home; kept importable)
    CODE_FN_FORMAT,
    CODE_STDIO_FORMAT,
    MATH_FORMAT,
    REASONING_FORMAT,
)
from coevo_jax.data.record import Record


class ChatTokenizer(Protocol):
    """What :func:`render_chat` needs from a tokenizer (docs/interfaces.md)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def apply_chat_template(
        self, messages: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str: ...


def format_line(record: Record | Mapping[str, Any]) -> str | None:
    """The one format instruction appended for this record's class (``None`` for ``if``).

    Raises ``domains.UnknownClassError`` (a ``ValueError``) for an unregistered class.
    """
    cls = record["class"]  # Record supports the JSON keys too
    return domains.get(cls, record_id=record.get("id")).format_line(record)


def render_prompt(record: Record | Mapping[str, Any]) -> str:
    """The user message for ``record``: its problem, a blank line, its format line."""
    problem = record["problem"]
    line = format_line(record)
    if line is None:
        return problem
    return f"{problem.rstrip()}\n\n{line}"


def chat_messages(
    record: Record | Mapping[str, Any], *, system_prompt: str | None = None
) -> list[dict[str, str]]:
    """The conversation for ``record``: one user turn, preceded by a system turn only when
    ``system_prompt`` is given (see :func:`render_chat`)."""
    msgs = [{"role": "user", "content": render_prompt(record)}]
    if system_prompt is not None:
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def render_chat(
    record: Record | Mapping[str, Any],
    tokenizer: ChatTokenizer,
    max_input_tokens: int = 800,
    *,
    system_prompt: str | None = None,
) -> list[int]:
    """Token ids of the chat-templated prompt, at most ``max_input_tokens`` long.

    No system turn is sent (``system_prompt=None``). Some templates then add their own:
    SmolLM2's writes "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    whenever the conversation has no system turn. Pass ``system_prompt=""`` to replace it
    with an empty system turn (no persona at all, at the cost of a format the model was not
    tuned on); the default keeps the backbone's own template behaviour.

    Over the limit, tokens are dropped from the left of the user content only: the result is
    ``encode(prefix) + encode(content)[-k:] + encode(suffix)``, where ``prefix``/``suffix`` are
    the template around the content and ``k`` fills the budget exactly. Deterministic; raises
    ``ValueError`` if the template alone exceeds the budget.
    """
    if max_input_tokens <= 0:
        raise ValueError(f"max_input_tokens must be positive, got {max_input_tokens}")
    messages = chat_messages(record, system_prompt=system_prompt)
    content = messages[-1]["content"]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if len(ids) <= max_input_tokens:
        return ids
    at = text.rfind(content)
    if at < 0:
        raise ValueError("the chat template altered the user content; cannot truncate it alone")
    prefix = list(tokenizer.encode(text[:at], add_special_tokens=False))
    suffix = list(tokenizer.encode(text[at + len(content) :], add_special_tokens=False))
    budget = max_input_tokens - len(prefix) - len(suffix)
    if budget <= 0:
        raise ValueError(
            f"the chat template alone takes {len(prefix) + len(suffix)} tokens, over the "
            f"{max_input_tokens}-token input limit"
        )
    body = list(tokenizer.encode(content, add_special_tokens=False))
    return prefix + body[-budget:] + suffix
