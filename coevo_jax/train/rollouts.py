"""A round's rollouts, from the engines' trajectories to what the buffers and router learn from.

Engines return trajectories in any order, some groups short when a request failed. This
module keeps only complete groups (all ``G`` samples of one (query, agent) pair), in a fixed
order, so every process of a multi-host run builds the same policy batch, and reduces them
to the per-(query, agent) rewards the router step reads and the per-agent sampling entropy
the exploration bonus reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from coevo_jax.rl.penalties import soft_overlong_penalty
from coevo_jax.train.buffers import Group
from rollout_bridge.engine import GenerationRequest


@dataclasses.dataclass(frozen=True)
class Rollouts:
    """A round's complete groups: ``pairs[k]`` (query position, agent) owns the trajectories
    ``flat[k*G:(k+1)*G]`` (as ``(pair, trajectory)``) and the rewards at the same slice;
    ``failures`` names the (query, agent) requests that were dropped or came back short."""

    pairs: list[tuple[int, int]]
    flat: list
    rewards: np.ndarray
    failures: list[str]
    group_size: int

    def buffer_groups(self, query_ids: Sequence[str]) -> Iterator[Group]:
        """Each complete group as a buffer :class:`Group` (``query_ids[q]`` names query
        ``q``), stamped with the oldest adapter version that sampled it (what
        ``rollout.max_staleness`` is measured from)."""
        for q, a, ts, rs in self.groups():
            yield Group(
                agent_id=a,
                query_id=query_ids[q],
                prompt_ids=tuple(ts[0].prompt_ids),
                completions=tuple(t.completion_ids for t in ts),
                logprobs=tuple(tuple(float(x) for x in t.logprobs) for t in ts),
                rewards=tuple(float(r) for r in rs),
                version=min(t.version for t in ts),
            )

    def groups(self) -> Iterator[tuple[int, int, list, np.ndarray]]:
        """``(q, a, trajectories, rewards)`` per complete group, in ``pairs`` order."""
        g = self.group_size
        for k, (q, a) in enumerate(self.pairs):
            yield (
                q,
                a,
                [t for _, t in self.flat[k * g : (k + 1) * g]],
                self.rewards[k * g : (k + 1) * g],
            )


def complete_groups(trajs: list, group_size: int, round_idx: int) -> tuple[list, list, list[str]]:
    """``(pairs, flat, incomplete)`` of trajectories whose ``query_id`` is
    ``"round:q:agent"``: the sorted (query, agent) pairs with all ``group_size`` samples,
    their trajectories flattened in sample order, and the query ids of incomplete pairs."""
    by_pair: dict[tuple[int, int], list] = {}
    for t in trajs:
        _, q, a = t.query_id.split(":")
        by_pair.setdefault((int(q), int(a)), []).append(t)
    pairs = sorted(p for p, ts in by_pair.items() if len(ts) == group_size)
    incomplete = [f"{round_idx}:{q}:{a}" for (q, a), ts in by_pair.items() if len(ts) != group_size]
    flat = [(p, t) for p in pairs for t in sorted(by_pair[p], key=lambda t: t.sample_index)]
    return pairs, flat, incomplete


def served_rewards(
    rollouts: Rollouts, n_queries: int, n_agents: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(rbar, served)``, both ``[B, N]``: each served (query, agent)'s mean group reward and
    whether it served; the router step learns only from the served cells."""
    rbar = np.zeros((n_queries, n_agents), np.float32)
    served = np.zeros((n_queries, n_agents), bool)
    for q, a, _, rs in rollouts.groups():
        rbar[q, a] = float(rs.mean())
        served[q, a] = True
    return rbar, served


def sampling_entropy(rollouts: Rollouts, n_agents: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, tokens)``, both ``[N]``: each agent's mean negative log-prob over the tokens
    it sampled this round, and how many tokens that mean covers.

    The mean negative log-prob of sampled tokens is an unbiased estimate of the sampling
    distribution's per-token entropy that needs no extra forward pass (our reading: the
    CERA-MoA paper does not say how the exploration bonus's entropy is measured).
    """
    ent_sum = np.zeros(n_agents)
    ent_tok = np.zeros(n_agents)
    for _, a, ts, _ in rollouts.groups():
        for t in ts:
            ent_sum[a] -= float(np.sum(t.logprobs))
            ent_tok[a] += len(t.logprobs)
    return np.where(ent_tok > 0, ent_sum / np.maximum(ent_tok, 1), 0.0), ent_tok


def rollout_seed(*parts: Any) -> int:
    """A 31-bit seed that is a fixed function of ``parts`` (stable across processes and
    Python runs, unlike ``hash``)."""
    h = hashlib.blake2b(repr(parts).encode(), digest_size=4).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


def generation_requests(
    group: Any,
    records: Sequence[Any],
    idx: Sequence[int],
    active: np.ndarray,
    cfg: Any,
    round_idx: int,
) -> list[GenerationRequest]:
    """Step 5's requests to one agent group's engine: ``G`` samples per (query, activated
    agent of ``group``), with ``query_id`` ``"round:q:agent"`` and a seed fixed by the run's
    seed, the round, the record and the agent.

    Args:
      group: a ``train.setup.AgentGroup``.
      records, idx: the training records and the round's record indices ``[B]``.
      active: ``[B, N]`` bool activation.
      cfg: the run's TrainConfig.
      round_idx: the round being generated.
    """
    ro = cfg.rollout
    return [
        GenerationRequest(
            prompt_ids=tuple(group.prompt(records, rec_idx, cfg.data.max_input_tokens)),
            agent_id=group.local(a),
            n=ro.group_size,
            max_tokens=ro.max_new_tokens,
            temperature=ro.temperature,
            top_p=ro.top_p,
            seed=rollout_seed(cfg.loop.seed, round_idx, rec_idx, a),
            query_id=f"{round_idx}:{q}:{a}",
        )
        for q, rec_idx in enumerate(idx)
        for a in group.agents
        if active[q, a]
    ]


def score_flat(
    flat: list, records: Sequence[Any], group_of: dict, reward_fn: Any, cfg: Any
) -> np.ndarray:
    """``[len(flat)]`` float32: one reward per ``((q, agent), trajectory)`` of ``flat``, from
    ``reward_fn(records, completions, agent_ids)`` on the decoded completions (each agent's
    own tokenizer, ``group_of[agent]``) plus the DAPO soft overlong penalty when
    ``rollout.overlong_penalty`` is on."""
    texts = [
        group_of[p[1]].backbone.tokenizer.decode(list(t.completion_ids), skip_special_tokens=True)
        for p, t in flat
    ]
    rewards = np.asarray(
        reward_fn([records[p[0]] for p, _ in flat], texts, [p[1] for p, _ in flat]), np.float32
    )
    ro = cfg.rollout
    if ro.overlong_penalty and len(flat):
        lengths = np.array([len(t.completion_ids) for _, t in flat])
        penalty = soft_overlong_penalty(lengths, ro.max_new_tokens, ro.overlong_cache)
        rewards = rewards + np.asarray(penalty)
    return rewards
