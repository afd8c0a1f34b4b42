"""No-evolution baselines of the EvoChamber paper: a stateless single agent (SA) and self-consistency
(SC, majority voting over k = 5 samples of one agent).

Both use the same task prompt as EvoChamber's members (no persona, no experience) and the
same reward function (an :class:`~coevo_jax.orchestrators.scoring.Outcome` or a float), so
their accuracy is under the same per-niche metric. SC votes on :func:`prompts.answer_key` (ties -> the earliest sample);
with no extractable answer it keeps the first sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.prompts import answer_key, plurality, task_prompt
from coevo_jax.orchestrators.scoring import as_outcome
from coevo_jax.text_llm import TextLLM, TextRequest

BASELINE_AGENT = "baseline"


def _summary(records: Sequence[Mapping[str, Any]], outcomes: Sequence[Any]) -> dict[str, Any]:
    per: dict[str, list[float]] = {}
    for r, o in zip(records, outcomes, strict=True):
        per.setdefault(str(r["niche"]), []).append(o.score)
    scores = [o.score for o in outcomes]
    return {
        "rewards": scores,
        "metrics": [o.metric for o in outcomes],
        "partial": [o.partial for o in outcomes],
        "accuracy": float(np.mean(scores)) if scores else 0.0,
        "solved_rate": float(np.mean([o.solved for o in outcomes])) if outcomes else 0.0,
        "accuracy_per_niche": {z: float(np.mean(v)) for z, v in per.items()},
    }


def self_consistency(
    records: Iterable[Mapping[str, Any]],
    llm: TextLLM,
    reward_fn,
    cfg: EvoChamberConfig,
    k: int = 5,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """SC@k: k samples (seeds ``cfg.seed + j``) per task, plurality answer scored.
    k = 1 is the single-agent baseline."""
    from tqdm.auto import tqdm

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    records = list(records)
    rewards = []
    for i, rec in enumerate(tqdm(records, desc=f"baseline k={k}", disable=not progress)):
        reqs = [
            TextRequest(
                task_prompt(rec),
                agent=BASELINE_AGENT,
                max_tokens=cfg.max_tokens,
                temperature=cfg.temperature if k > 1 else 0.0,
                seed=cfg.seed + 7919 * i + j,
                tag="solve",
            )
            for j in range(k)
        ]
        outs = llm.complete(reqs)
        win = plurality([answer_key(rec, o) for o in outs])
        rewards.append(as_outcome(reward_fn(rec, outs[0 if win is None else win]), rec))
    return _summary(records, rewards)


def single_agent(
    records, llm: TextLLM, reward_fn, cfg: EvoChamberConfig, *, progress: bool = False
) -> dict[str, Any]:
    """SA: one greedy answer per task."""
    return self_consistency(records, llm, reward_fn, cfg, k=1, progress=progress)
