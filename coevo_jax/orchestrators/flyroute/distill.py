"""Profile distillation: every M new successes, an LLM rewrites the learned description.

The prompt carries the seed description, the prior learned description (if any) and the most
recent successes, and asks for a compact description of what the evidence shows the agent
does well (the FlyRoute paper: "summarizing evidence-supported capabilities rather than introducing
unsupported ones"). Each distillation appends a version to the profile; older versions stay.
"""

from __future__ import annotations

import re
from collections import Counter

from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.profiles import LearnedVersion, Profile, ProfileStore
from coevo_jax.text_llm import TextLLM, TextRequest

DISTILL_TAG = "flyroute.distill"


def distill_prompt(profile: Profile, *, recent: int = 10, response_chars: int = 300) -> str:
    """The distillation prompt for ``profile`` (its ``recent`` latest gated successes)."""
    gated = [s for s in profile.successes if not s.is_seed][-recent:]
    lines = [
        f"You maintain the capability profile of an AI agent named {profile.name!r}.",
        "",
        f"Developer's description: {profile.seed_description or '(none given)'}",
    ]
    if profile.learned_description:
        lines.append(f"Current learned description: {profile.learned_description}")
    lines += ["", "Queries this agent recently answered well (with its answers):"]
    for i, s in enumerate(gated, 1):
        resp = s.response.strip().replace("\n", " ")
        if len(resp) > response_chars:
            resp = resp[:response_chars] + " [...]"
        lines.append(f"{i}. Query: {s.query.strip()}")
        lines.append(f"   Answer: {resp}")
    lines += [
        "",
        "Write an updated description, two or three sentences, of the kinds of queries this "
        "agent handles well. Describe only capabilities the examples support; it may differ "
        "from the developer's description. Reply with the description only.",
    ]
    return "\n".join(lines)


_PREFIX = re.compile(
    r"^\s*\**\s*(?:(?:updated|learned|new)\s+)?description\s*\**\s*:\s*\**\s*", re.IGNORECASE
)


def clean_description(text: str, *, max_chars: int = 800) -> str:
    """Strips a "Description:" prefix, surrounding quotes and whitespace; cuts to ``max_chars``."""
    t = _PREFIX.sub("", text.strip()).strip().strip('"').strip()
    return t[:max_chars].rstrip()


def distill_due(profile: Profile, every: int) -> bool:
    """True when ``profile`` gained ``every`` gated successes since its last distillation."""
    last = profile.learned[-1].n_successes if profile.learned else 0
    return profile.n_gated - last >= every


class Distiller:
    """Runs distillation for agents that are due.

    Args:
      llm: serves the prompts (greedy).
      config: ``distill_every`` (M), ``distill_recent``, ``distill_response_chars``,
        ``description_max_chars``, ``distill_max_tokens``.
      service_agent: the ``TextRequest.agent`` the distiller runs as (-1: bare backbone).

    An empty reply keeps the prior description and is counted in ``stats["empty"]``; the
    agent is retried after its next success.
    """

    def __init__(self, llm: TextLLM, config: FlyRouteConfig, *, service_agent: str | int = -1):
        self.llm = llm
        self.config = config
        self.service_agent = service_agent
        self.stats: Counter = Counter()

    def run(
        self, store: ProfileStore, agents: list[str], *, step: int = -1
    ) -> dict[str, LearnedVersion]:
        """Distils every agent in ``agents`` that is due; returns agent -> its new version."""
        cfg = self.config
        due = [a for a in agents if distill_due(store[a], cfg.distill_every)]
        if not due:
            return {}
        reqs = [
            TextRequest(
                prompt=distill_prompt(
                    store[a], recent=cfg.distill_recent, response_chars=cfg.distill_response_chars
                ),
                agent=self.service_agent,
                max_tokens=cfg.distill_max_tokens,
                temperature=0.0,
                seed=cfg.seed + max(step, 0),
                tag=DISTILL_TAG,
            )
            for a in due
        ]
        outs = self.llm.complete(reqs)
        new: dict[str, LearnedVersion] = {}
        for a, out in zip(due, outs, strict=True):
            text = clean_description(out, max_chars=cfg.description_max_chars)
            self.stats["attempted"] += 1
            if not text:
                self.stats["empty"] += 1
                continue
            new[a] = store.add_learned(a, text, step=step)
        return new
