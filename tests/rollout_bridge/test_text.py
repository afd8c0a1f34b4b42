"""EngineTextLLM: prompts are never cut; over-budget prompts are errors."""

import pytest

from coevo_jax.text_llm import TextRequest
from rollout_bridge.engine import Trajectory
from rollout_bridge.text import EngineTextLLM, PromptTooLongError


class CharTokenizer:
    """One token per character; the chat template adds 4 characters ("<u>" + "\\n")."""

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "<u>" + messages[0]["content"] + "\n"

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class EchoEngine:
    """Completes with the first 3 prompt tokens; records the requests."""

    def __init__(self):
        self.requests = []

    def generate(self, requests):
        self.requests.extend(requests)
        return [
            Trajectory(
                prompt_ids=r.prompt_ids,
                completion_ids=r.prompt_ids[:3],
                logprobs=(0.0,) * 3,
                finish_reason="length",
                agent_id=r.agent_id,
                version=0,
                query_id=r.query_id,
            )
            for r in requests
        ]


def test_prompt_within_budget_is_sent_whole():
    eng = EchoEngine()
    llm = EngineTextLLM(eng, CharTokenizer(), context_length=30)
    prompt = "HEAD" + "x" * 10 + "TAIL"  # 18 chars + 4 template = 22 <= 30 - 8
    assert llm.prompt_budget(8) == 22
    assert llm.count_tokens(prompt) == 22
    llm.complete([TextRequest(prompt, agent=-1, max_tokens=8)])
    sent = "".join(chr(i) for i in eng.requests[0].prompt_ids)
    assert sent == "<u>" + prompt + "\n"


def test_over_budget_prompt_raises_instead_of_truncating():
    eng = EchoEngine()
    llm = EngineTextLLM(eng, CharTokenizer(), context_length=30, max_prompt_tokens=20)
    assert llm.prompt_budget(8) == 20  # the cap is tighter than 30 - 8
    with pytest.raises(PromptTooLongError, match=r"tag 'router'.*21 tokens, over its budget of 20"):
        llm.complete(
            [
                TextRequest("ok", agent=-1, max_tokens=8),
                TextRequest("y" * 17, agent=-1, max_tokens=8, tag="router"),
            ]
        )
    assert eng.requests == []  # nothing was generated


def test_budget_follows_the_requests_generation_length():
    llm = EngineTextLLM(EchoEngine(), CharTokenizer(), context_length=30)
    assert llm.prompt_budget(26) == 4
    with pytest.raises(PromptTooLongError):
        llm.complete([TextRequest("a", agent=-1, max_tokens=26)])  # 5 tokens > 4
    assert EngineTextLLM(EchoEngine(), CharTokenizer()).prompt_budget(8) is None
    with pytest.raises(ValueError, match="context_length"):
        EngineTextLLM(EchoEngine(), CharTokenizer(), context_length=0)
