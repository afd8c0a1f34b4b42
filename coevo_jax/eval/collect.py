"""One generation pass that every evaluation method is then computed from.

At inference each activated agent writes one completion, so what a routing method outputs is
a selection among the N agents' completions. We therefore generate one completion per
(query, agent) plus one from the base model (adapter off), score each with its record's
verifier, and compute every method, baseline and tau value from those arrays
(``coevo_jax.eval.methods``) without generating again. Token accounting charges a method for
the completions of the agents it activates.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from coevo_jax.data.templates import render_chat
from coevo_jax.rewards import score_batch
from coevo_jax.rewards.math import last_boxed
from coevo_jax.rewards.math import normalize as math_normalize
from coevo_jax.rewards.reasoning import normalize as reasoning_normalize
from coevo_jax.router import features, pad_queries
from coevo_jax.train.system import System
from rollout_bridge.engine import GenerationRequest


@dataclasses.dataclass(frozen=True)
class Collected:
    """Everything the methods need, for Q queries and N agents.

    Attributes:
      records: the Q evaluated records.
      f: ``[Q, N]`` familiarity at inference (no exploration bonuses).
      texts: ``[Q][N]`` agent completions; ``base_texts``: ``[Q]`` base-model completions.
      scores: ``[Q, N]`` verifier score of each agent completion; ``base_scores``: ``[Q]``.
      tokens: ``[Q, N]`` completion lengths; ``base_tokens``: ``[Q]``.
      answers: ``[Q][N]`` extracted final answers (None when not extractable).
      router_ms: mean router latency per query at batch 1 (features + heads), milliseconds.
    """

    records: list[Any]
    f: np.ndarray
    texts: list[list[str]]
    base_texts: list[str]
    scores: np.ndarray
    base_scores: np.ndarray
    tokens: np.ndarray
    base_tokens: np.ndarray
    answers: list[list[str | None]]
    router_ms: float


def extract_answer(record: Any, completion: str) -> str | None:
    """The normalised final answer for voting (math/reasoning), else None."""
    klass = record["class"] if not hasattr(record, "cls") else record.cls
    boxed = last_boxed(completion)
    if boxed is None:
        return None
    if klass == "math":
        return math_normalize(boxed)[0]
    if klass == "reasoning":
        return reasoning_normalize(boxed)
    return None


def collect(
    system: System,
    records: Sequence[Any],
    *,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    score_fn: Callable[[Sequence[Any], Sequence[str]], Sequence[float]] | None = None,
    latency_queries: int = 8,
    seed: int = 0,
    chunk_queries: int = 16,
    progress: bool = False,
) -> Collected:
    """Routes, generates and scores ``records`` with a trained run's router and agents.

    Args:
      system: a ``coevo_jax.train.system.System`` restored from a checkpoint (or a trainer's).
      records: evaluation records.
      max_new_tokens, temperature: generation settings (greedy by default).
      score_fn: ``(records, completions) -> scores`` (default: the verifiers).
      latency_queries: how many queries to time the router on, one at a time.
      seed: generation seed (query q uses ``seed + q``).
      chunk_queries: queries per engine call (each call holds ``chunk * (agents + 1)``
        requests); the progress bar advances per chunk.
      progress: show a tqdm bar over the generation.
    """
    cfg = system.cfg
    bb = system.router_backbone
    prompts = [render_chat(r, bb.tokenizer, cfg.data.max_input_tokens) for r in records]
    route_f = _familiarity_fn(system)
    f = _route(route_f, prompts, system)
    router_ms = _router_latency_ms(route_f, prompts[: max(1, latency_queries)], system)
    gen = _generate(
        system,
        records,
        prompts,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        chunk_queries=chunk_queries,
        progress=progress,
    )
    scores, base_scores = _score(records, gen, score_fn or score_batch)
    answers = [
        [extract_answer(r, t) for t in row] for r, row in zip(records, gen.texts, strict=True)
    ]
    return Collected(
        records=list(records),
        f=f,
        texts=gen.texts,
        base_texts=gen.base_texts,
        scores=scores,
        base_scores=base_scores,
        tokens=gen.tokens,
        base_tokens=gen.base_tokens,
        answers=answers,
        router_ms=router_ms,
    )


@dataclasses.dataclass(frozen=True)
class Generations:
    """One completion per (query, agent) and one per query from the base model.

    Attributes:
      texts: ``[Q][N]`` agent completions; ``base_texts``: ``[Q]``.
      tokens: ``[Q, N]`` completion lengths; ``base_tokens``: ``[Q]``.
    """

    texts: list[list[str]]
    tokens: np.ndarray
    base_texts: list[str]
    base_tokens: np.ndarray


def _familiarity_fn(system: System) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``(ids, mask) -> f [B, N]``: router features and heads at inference (no exploration)."""
    cfg = system.cfg
    bb = system.router_backbone
    router_state = system.router

    def route_f(ids, mask):
        h = features(
            bb.params,
            bb.cfg,
            ids,
            mask,
            layers=cfg.router.feature_layers,
            max_len=cfg.router.max_prompt_tokens,
        )
        head = router_state.head
        f, _ = head.scores(router_state.head_input(h), router_state.cfg)
        return f

    return route_f


def _route(route_f: Callable, prompts: Sequence[Sequence[int]], system: System) -> np.ndarray:
    """``[Q, N]`` familiarity of every prompt, 32 prompts per call."""
    cfg = system.cfg
    pad_id = system.router_backbone.tokenizer.pad_token_id
    f_rows = []
    for start in range(0, len(prompts), 32):
        ids, mask = pad_queries(
            prompts[start : start + 32], max_len=cfg.router.max_prompt_tokens, pad_id=pad_id
        )
        f_rows.append(np.asarray(route_f(jnp.asarray(ids), jnp.asarray(mask))))
    return np.concatenate(f_rows, axis=0)


def _router_latency_ms(
    route_f: Callable, prompts: Sequence[Sequence[int]], system: System
) -> float:
    """Median router latency at batch 1 over ``prompts``, in ms (compiled before timing)."""
    cfg = system.cfg
    pad_id = system.router_backbone.tokenizer.pad_token_id
    times = []
    for p in prompts:
        ids, mask = pad_queries([p], max_len=cfg.router.max_prompt_tokens, pad_id=pad_id)
        ids, mask = jnp.asarray(ids), jnp.asarray(mask)
        jax.block_until_ready(route_f(ids, mask))  # compile outside the timing
        t0 = time.perf_counter()
        jax.block_until_ready(route_f(ids, mask))
        times.append(time.perf_counter() - t0)
    return 1000.0 * float(np.median(times))


def _requests(
    system: System,
    group: Any,
    records: Sequence[Any],
    prompts: Sequence[Sequence[int]],
    qs: range,
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> list[GenerationRequest]:
    """One request per (query in ``qs``, agent of ``group``), plus the base model's when
    ``group`` is the first; ``query_id`` is ``"q:agent"`` or ``"q:base"``."""
    bb = system.router_backbone
    max_input = system.cfg.data.max_input_tokens
    reqs = []
    for q in qs:
        p = tuple(
            prompts[q]
            if group.backbone is bb
            else render_chat(records[q], group.backbone.tokenizer, max_input)
        )
        for a in group.agents:
            reqs.append(
                GenerationRequest(
                    p,
                    group.local(a),
                    1,
                    max_new_tokens,
                    temperature,
                    1.0,
                    seed + q,
                    query_id=f"{q}:{a}",
                )
            )
        if group is system.groups[0]:
            reqs.append(
                GenerationRequest(
                    p, -1, 1, max_new_tokens, temperature, 1.0, seed + q, query_id=f"{q}:base"
                )
            )
    return reqs


def _generate(
    system: System,
    records: Sequence[Any],
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    chunk_queries: int,
    progress: bool,
) -> Generations:
    """Every agent's and the base model's completion of every record, through each agent
    group's engine, ``chunk_queries`` queries per engine call."""
    n = system.cfg.lora.n_agents
    texts = [[""] * n for _ in records]
    tokens = np.zeros((len(records), n), np.int64)
    base_texts = [""] * len(records)
    base_tokens = np.zeros(len(records), np.int64)
    chunks = [
        (g, range(start, min(start + chunk_queries, len(records))))
        for g in system.groups
        for start in range(0, len(records), max(1, chunk_queries))
    ]
    bar = None
    if progress:
        bar = tqdm(total=len(records) * len(system.groups), desc="eval generate", unit="query")
    for g, qs in chunks:
        tok = g.backbone.tokenizer
        reqs = _requests(
            system,
            g,
            records,
            prompts,
            qs,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
        )
        for t in g.engine.generate(reqs):
            q, who = t.query_id.split(":")
            text = tok.decode(list(t.completion_ids), skip_special_tokens=True)
            if who == "base":
                base_texts[int(q)], base_tokens[int(q)] = text, len(t.completion_ids)
            else:
                texts[int(q)][int(who)], tokens[int(q), int(who)] = text, len(t.completion_ids)
        if bar is not None:
            bar.update(len(qs))
    if bar is not None:
        bar.close()
    return Generations(texts=texts, tokens=tokens, base_texts=base_texts, base_tokens=base_tokens)


def _score(
    records: Sequence[Any],
    gen: Generations,
    score_fn: Callable[[Sequence[Any], Sequence[str]], Sequence[float]],
) -> tuple[np.ndarray, np.ndarray]:
    """``([Q, N] agent scores, [Q] base scores)`` from one ``score_fn`` call over all texts."""
    n = gen.tokens.shape[1]
    flat_recs = [r for r in records for _ in range(n)] + list(records)
    flat_texts = [t for row in gen.texts for t in row] + gen.base_texts
    s = np.asarray(score_fn(flat_recs, flat_texts), np.float32)
    return s[: len(records) * n].reshape(len(records), n), s[len(records) * n :]
