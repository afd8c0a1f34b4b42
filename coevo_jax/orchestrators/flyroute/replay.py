"""Training-stream replay and routing-accuracy evaluation (the FlyRoute paper's protocol).

The harness owns the gold labels: it hands :meth:`FlyRoute.step` only ``item.query`` and
scores the returned decisions itself. At chosen checkpoints (numbers of replayed training
queries; 0 is "FlyRoute (cold)") it saves the profiles and evaluates routing on the held-out
test set: overall accuracy and accuracy per domain (gold class), for the LLM router and, as a
retrieval-only reference, the BM25 argmax of ``R(q, a)``. Baseline: the LLM router on seed
descriptions only (no retrieval, no updates).

Results are rewritten to ``results.json`` after every checkpoint, so a crash keeps what was
done.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from coevo_jax._config import to_dict
from coevo_jax.orchestrators.flyroute.bench_data import LabeledQuery
from coevo_jax.orchestrators.flyroute.exploit import Router
from coevo_jax.orchestrators.flyroute.pipeline import FlyRoute
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.retrieval import ProfileRetriever


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Routing accuracy on a labelled set.

    Attributes:
      accuracy: fraction of items whose prediction equals the gold route.
      per_domain: domain -> accuracy on the items of that domain.
      n: number of items; per_domain_n: items per domain.
      unparsed: router replies with no agent name (fallback used).
      bm25_accuracy: accuracy of routing to ``argmax_a R(q, a)`` (None if not computed).
      predictions: query id -> predicted agent (None: no agent picked).
      included_mean: retrieved queries the router prompt showed per call (all agents
        together), averaged over the items.
      prompt_tokens_max: the longest router prompt in tokens (None: the LLM cannot count).
      prompt_budget: the router's prompt budget in tokens (None: unbounded).
    """

    accuracy: float
    per_domain: dict[str, float]
    n: int
    per_domain_n: dict[str, int]
    unparsed: int = 0
    bm25_accuracy: float | None = None
    bm25_per_domain: dict[str, float] | None = None
    predictions: dict[str, str | None] = dataclasses.field(default_factory=dict)
    included_mean: float = 0.0
    prompt_tokens_max: int | None = None
    prompt_budget: int | None = None

    def summary(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("predictions")
        return d


def _accuracy(
    items: Sequence[LabeledQuery], preds: Sequence[str | None]
) -> tuple[float, dict[str, float], dict[str, int]]:
    hit: Counter = Counter()
    tot: Counter = Counter()
    for it, p in zip(items, preds, strict=True):
        tot[it.domain] += 1
        hit[it.domain] += int(p == it.gold)
    n = sum(tot.values())
    acc = sum(hit.values()) / n if n else 0.0
    return acc, {d: hit[d] / tot[d] for d in sorted(tot)}, {d: tot[d] for d in sorted(tot)}


def evaluate(
    router: Router,
    store: ProfileStore,
    items: Sequence[LabeledQuery],
    *,
    batch_size: int = 16,
    bm25: bool = True,
    progress: bool = True,
    desc: str = "eval",
) -> EvalResult:
    """Routes ``items`` (exploit only; profiles unchanged) and scores against gold."""
    retriever = ProfileRetriever(store)
    preds: list[str | None] = []
    bm25_preds: list[str | None] = []
    unparsed = 0
    included: list[int] = []
    tokens: list[int] = []
    names = store.names
    bar = tqdm(total=len(items), desc=desc, disable=not progress, leave=False)
    for i in range(0, len(items), batch_size):
        chunk = items[i : i + batch_size]
        scores = [retriever.score(it.query.text) for it in chunk]
        for r in router.route([it.query for it in chunk], store, retriever, scores=scores):
            preds.append(r.agents[0] if r.agents else None)
            unparsed += int(not r.parsed)
            included.append(sum(r.included.values()))
            if r.prompt_tokens is not None:
                tokens.append(r.prompt_tokens)
        for s in scores:
            raw = s.raw
            top = max(names, key=lambda a: (raw[a], -names.index(a)))
            bm25_preds.append(top if raw[top] > 0 else None)
        bar.update(len(chunk))
    bar.close()
    acc, per, per_n = _accuracy(items, preds)
    b_acc, b_per, _ = _accuracy(items, bm25_preds) if bm25 else (None, None, None)
    return EvalResult(
        acc,
        per,
        len(items),
        per_n,
        unparsed,
        b_acc,
        b_per,
        {it.query.id: p for it, p in zip(items, preds, strict=True)},
        sum(included) / len(included) if included else 0.0,
        max(tokens) if tokens else None,
        router.budget,
    )


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False))
    os.replace(tmp, path)


def replay(
    pipeline: FlyRoute,
    train: Sequence[LabeledQuery],
    test: Sequence[LabeledQuery],
    *,
    checkpoints: Sequence[int] = (0,),
    out_dir: str | Path | None = None,
    baselines: dict[str, Router] | None = None,
    eval_batch_size: int = 16,
    progress: bool = True,
    on_step: Callable[[int, Any], None] | None = None,
    manifest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Streams ``train`` through ``pipeline`` and evaluates routing at ``checkpoints``.

    Args:
      pipeline: the FlyRoute pipeline (its store is mutated).
      train: the training stream, in order.
      test: the held-out test set.
      checkpoints: numbers of replayed training queries after which to evaluate and save
        (0 = before any replay, "FlyRoute (cold)"); values past ``len(train)`` are clipped.
      out_dir: where ``results.json`` and ``checkpoints/step_XXXXXX.jsonl`` go (None: nowhere).
      baselines: name -> router evaluated once on the cold profiles (e.g. seed descriptions
        only).
      on_step: called with (step, StepResult) after each step.

    Returns:
      The results dict also written to ``results.json``.
    """
    n = len(train)
    cps = sorted({min(max(int(c), 0), n) for c in checkpoints})
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    store = pipeline.store
    results: dict[str, Any] = {
        "config": to_dict(pipeline.config),
        "manifest": manifest or {},
        "n_train": n,
        "n_test": len(test),
        "agents": store.names,
        "baselines": {},
        "checkpoints": [],
        "growth": {"step": [0], "sizes": {a: [s] for a, s in store.store_sizes().items()}},
        "train_online": {"step": [], "accuracy": []},
    }
    t0 = time.time()

    def save() -> None:
        if out is not None:
            results["wall_s"] = time.time() - t0
            _atomic_json(out / "results.json", results)

    for name, router in (baselines or {}).items():
        r = evaluate(
            router,
            store,
            test,
            batch_size=eval_batch_size,
            bm25=False,
            progress=progress,
            desc=name,
        )
        results["baselines"][name] = r.summary()
        save()

    def checkpoint(step: int) -> None:
        entry: dict[str, Any] = {"step": step}
        if out is not None:
            path = store.save(out / "checkpoints" / f"step_{step:06d}.jsonl")
            entry["profiles"] = str(path.relative_to(out))
        r = evaluate(
            pipeline.router,
            store,
            test,
            batch_size=eval_batch_size,
            progress=progress,
            desc=f"eval@{step}",
        )
        entry.update(r.summary())
        entry["store_sizes"] = store.store_sizes()
        entry["learned_versions"] = {p.name: len(p.learned) for p in store}
        entry["pipeline_stats"] = dict(pipeline.stats)
        entry["gate_stats"] = dict(getattr(pipeline.gate, "stats", {}))
        results["checkpoints"].append(entry)
        save()

    hits = 0
    per_agent_explored: Counter = Counter()
    pending = list(cps)
    if pending and pending[0] == 0:
        checkpoint(0)
        pending.pop(0)
    bar = tqdm(total=n, desc="replay", disable=not progress)
    for i, item in enumerate(train):
        res = pipeline.step(item.query)  # the gold label stays here
        hits += int(res.prediction == item.gold)
        for a in res.dispatched:
            if (
                res.exploration is not None
                and a in res.exploration.selected
                and a not in res.route.agents
            ):
                per_agent_explored[a] += 1
        step = i + 1
        growth = results["growth"]
        growth["step"].append(step)
        for a, s in store.store_sizes().items():
            growth["sizes"].setdefault(a, [0] * (len(growth["step"]) - 1)).append(s)
        results["train_online"]["step"].append(step)
        results["train_online"]["accuracy"].append(hits / step)
        if on_step is not None:
            on_step(i, res)
        bar.update(1)
        bar.set_postfix(acc=f"{hits / step:.2f}", stored=pipeline.stats["stored"])
        if pending and pending[0] == step:
            pending.pop(0)
            results["explored_per_agent"] = dict(per_agent_explored)
            checkpoint(step)
    bar.close()
    results["explored_per_agent"] = dict(per_agent_explored)
    results["router_stats"] = dict(pipeline.router.stats)
    save()
    return results


def seed_only_router(llm: Any, config: Any, *, service_agent: str | int = -1) -> Router:
    """Baseline: the LLM router on static seed descriptions, no retrieval, no fallback."""
    return Router(
        llm,
        config,
        use_retrieval=False,
        description="seed",
        fallback="none",
        service_agent=service_agent,
    )
