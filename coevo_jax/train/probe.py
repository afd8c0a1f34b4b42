"""Training curves on a fixed held-out probe set, in inference mode (no exploration).

Every ``loop.probe_every`` rounds the loop routes a fixed, domain-stratified sample of the
held-out split with the router as it would serve at test time (``s = f``, threshold
``eval_tau``) and records:

- ``macro_reward``: the mean over domains of the reward of the router's top-1 agent (the
  most familiar one), from one greedy completion per query; ``reward_by_domain`` beside it;
- ``mean_active``: agents activated per query at ``eval_tau`` (``active_by_domain`` too);
- ``familiarity_by_domain``: mean familiarity of each agent per domain;
- ``nmi``: the normalised mutual information between domain and top-1 agent (0: routing
  ignores the domain; 1: each domain has its own agent and vice versa);
- ``tokens_per_query``: completion tokens of the top-1 completions.

Only the top-1 agent generates, so a probe costs one greedy completion per probe query; the
activation statistics come from the familiarity scores alone. A probe measures the state
after ``after_rounds`` completed rounds and is logged with the round that follows it.

The pure pieces (:func:`stratified_indices`, :func:`macro_average`, :func:`routing_nmi`,
:func:`familiarity_by_domain`, :func:`eval_activation`, :func:`summarize`) take numpy arrays
and are tested alone; :func:`run_probe` wires them to a system's router and engines.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from coevo_jax.data.templates import render_chat
from coevo_jax.router import activate, route
from coevo_jax.train.distributed import to_host
from rollout_bridge.engine import GenerationError, GenerationRequest


def domain_of(record: Any) -> str:
    """A record's domain: its ``source`` (the mixtures' unit of a dataset), else its class."""
    get = record.get if hasattr(record, "get") else lambda k: getattr(record, k, None)
    src = get("source")
    if src:
        return str(src)
    cls = get("class") or getattr(record, "cls", None)
    if not cls:
        raise ValueError(f"probe record {get('id')!r}: neither 'source' nor 'class' is set")
    return str(cls)


def stratified_indices(domains: Sequence[str], size: int, seed: int) -> list[int]:
    """``min(size, len(domains))`` indices, spread as evenly as possible over domains.

    Each domain's indices are shuffled by ``random.Random(f"{seed}:{domain}")`` and the
    domains (sorted) are drawn from in turn, so the result depends only on the inputs.

    Args:
      domains: ``[Q]`` domain label of each candidate record.
      size: how many to pick (>= 1).
      seed: sampling seed.

    Returns:
      Sorted list of distinct indices into ``domains``.
    """
    if size < 1:
        raise ValueError(f"probe size must be >= 1, got {size}")
    pools: dict[str, list[int]] = {}
    for i, d in enumerate(domains):
        pools.setdefault(d, []).append(i)
    for d, pool in pools.items():
        random.Random(f"{seed}:{d}").shuffle(pool)
    out: list[int] = []
    order = sorted(pools)
    depth = 0
    while len(out) < min(size, len(domains)):
        for d in order:
            if depth < len(pools[d]) and len(out) < size:
                out.append(pools[d][depth])
        depth += 1
    return sorted(out)


def macro_average(values: np.ndarray, domains: Sequence[str]) -> tuple[float, dict[str, float]]:
    """``(macro, per_domain)``: the unweighted mean over domains of each domain's mean.

    Args:
      values: ``[Q]`` float per query.
      domains: ``[Q]`` labels.
    """
    values = np.asarray(values, np.float64)
    if values.shape != (len(domains),):
        raise ValueError(f"values {values.shape} and domains ({len(domains)}) differ in length")
    if not len(domains):
        raise ValueError("macro_average of no queries")
    labels = np.asarray(domains)
    per = {str(d): float(values[labels == d].mean()) for d in sorted(set(domains))}
    return float(np.mean(list(per.values()))), per


def routing_nmi(domains: Sequence[str], top1: np.ndarray) -> float:
    """Normalised mutual information (arithmetic normalisation) between domain and top-1 agent.

    Args:
      domains: ``[Q]`` labels.
      top1: ``[Q]`` int agent index.
    """
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(list(domains), np.asarray(top1).tolist()))


def mean_by_label(values: np.ndarray, labels: Sequence[str]) -> dict[str, list[float]]:
    """Column means of ``values`` over the rows of each label: ``{label: [N] floats}``.

    The one grouping behind the probe's ``familiarity_by_domain`` and the training record's
    ``familiarity.by_class`` (``train.loop``). Labels are sorted; the mean is taken in the
    dtype of ``values`` (the loop's float32 familiarity, the probe's float64 copy), so the
    caller chooses the precision.

    Args:
      values: ``[Q, N]`` array.
      labels: ``[Q]`` label of each row.
    """
    values = np.asarray(values)
    arr = np.asarray([str(x) for x in labels])
    return {d: values[arr == d].mean(axis=0).tolist() for d in sorted(set(arr.tolist()))}


def familiarity_by_domain(f: np.ndarray, domains: Sequence[str]) -> dict[str, list[float]]:
    """Mean familiarity of every agent per domain: ``{domain: [N] floats}``.

    Args:
      f: ``[Q, N]`` familiarity.
      domains: ``[Q]`` labels.
    """
    return mean_by_label(np.asarray(f, np.float64), domains)


def eval_activation(f: np.ndarray, *, tau: float, routing: str = "threshold", top_k: int = 1):
    """``[Q, N]`` bool activation at inference (ranking by ``f`` alone).

    ``routing="threshold"``: the smallest prefix of agents ranked by ``f`` (ties to the
    lower index) whose cumulative familiarity reaches ``tau``, every agent when none does
    (``coevo_jax.router.select_agents`` with ``s = f``); ``"top_k"``: the ``top_k`` most
    familiar agents.
    """
    f = jnp.asarray(f, jnp.float32)
    return np.asarray(activate(f, routing=routing, tau=tau, top_k=top_k))


def summarize(
    domains: Sequence[str],
    f: np.ndarray,
    active: np.ndarray,
    rewards: np.ndarray,
    tokens: np.ndarray,
) -> dict[str, Any]:
    """The probe record from per-query arrays (see the module docstring for the keys).

    Args:
      domains: ``[Q]`` labels.
      f: ``[Q, N]`` familiarity at inference.
      active: ``[Q, N]`` bool activation at ``eval_tau``.
      rewards: ``[Q]`` reward of the top-1 agent's completion.
      tokens: ``[Q]`` its length in tokens.
    """
    f, active = np.asarray(f), np.asarray(active, bool)
    if f.shape != active.shape or f.shape[0] != len(domains):
        raise ValueError(f"f {f.shape}, active {active.shape}, {len(domains)} domains disagree")
    top1 = f.argmax(axis=1)
    macro, per = macro_average(rewards, domains)
    _, act_per = macro_average(active.sum(axis=1), domains)
    labels = np.asarray(domains)
    n = f.shape[1]
    return {
        "queries": len(domains),
        "macro_reward": macro,
        "reward_by_domain": per,
        "mean_active": float(active.sum(axis=1).mean()),
        "active_by_domain": act_per,
        "familiarity_by_domain": familiarity_by_domain(f, domains),
        "top1_by_domain": {
            str(d): np.bincount(top1[labels == d], minlength=n).tolist()
            for d in sorted(set(domains))
        },
        "nmi": routing_nmi(domains, top1),
        "tokens_per_query": float(np.mean(tokens)) if len(tokens) else 0.0,
    }


@dataclasses.dataclass
class ProbeSet:
    """The fixed probe queries: records, their domains, and prompt ids cached per group."""

    records: list[Any]
    domains: list[str]
    prompts: dict[tuple[int, int], list[int]] = dataclasses.field(default_factory=dict)

    @classmethod
    def sample(cls, records: Sequence[Any], size: int, seed: int) -> ProbeSet:
        """A domain-stratified sample of ``size`` of ``records`` (see :func:`stratified_indices`)."""
        domains = [domain_of(r) for r in records]
        idx = stratified_indices(domains, size, seed)
        return cls([records[i] for i in idx], [domains[i] for i in idx])


def run_probe(
    system: Any, probe: ProbeSet, reward_fn: Callable, *, max_new_tokens: int
) -> dict[str, Any]:
    """Routes and answers ``probe`` with ``system``'s router and engines (process 0 only).

    Features come from ``system.query_features`` (what training routes on), familiarity
    from ``route(train=False)``, activation from :func:`eval_activation` at
    ``system.cfg.eval_tau``; the top-1 agent writes one greedy completion
    (``max_new_tokens``) per query, scored by ``reward_fn(records, completions,
    agent_ids)``. Nothing in the system's state changes.

    Args:
      system: a ``coevo_jax.train.system.System``.
    """
    cfg = system.cfg
    tok = system.router_backbone.tokenizer
    h = system.query_features(
        [render_chat(r, tok, cfg.data.max_input_tokens) for r in probe.records]
    )
    f = to_host(route(system.router, h, train=False).f)
    active = eval_activation(
        f, tau=cfg.eval_tau, routing=cfg.router.routing, top_k=cfg.router.top_k
    )
    top1 = f.argmax(axis=1)
    rewards = np.zeros(len(probe.records), np.float32)
    tokens = np.zeros(len(probe.records), np.int64)
    texts: dict[int, str] = {}
    for k, g in enumerate(system.groups):
        if g.engine is None:  # a process other than the driver generates nothing
            continue
        reqs = []
        for q, rec in enumerate(probe.records):
            if int(top1[q]) not in g.agents:
                continue
            if (k, q) not in probe.prompts:
                probe.prompts[(k, q)] = render_chat(
                    rec, g.backbone.tokenizer, cfg.data.max_input_tokens
                )
            reqs.append(
                GenerationRequest(
                    prompt_ids=tuple(probe.prompts[(k, q)]),
                    agent_id=g.local(int(top1[q])),
                    n=1,
                    max_tokens=max_new_tokens,
                    temperature=0.0,
                    seed=q,
                    query_id=str(q),
                )
            )
        if not reqs:
            continue
        try:
            trajs = g.engine.generate(reqs)
        except GenerationError as e:  # a failed query scores 0 (it is counted in the log)
            trajs = list(e.trajectories)
        for t in trajs:
            q = int(t.query_id)
            tokens[q] = len(t.completion_ids)
            texts[q] = g.backbone.tokenizer.decode(list(t.completion_ids), skip_special_tokens=True)
    done = sorted(texts)
    if done:
        scored = reward_fn(
            [probe.records[q] for q in done], [texts[q] for q in done], [int(top1[q]) for q in done]
        )
        rewards[done] = np.asarray(scored, np.float32)
    out = summarize(probe.domains, f, active, rewards, tokens)
    out["failed"] = len(probe.records) - len(done)
    return out
