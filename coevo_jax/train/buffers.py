"""Per-agent LIFO buffers of trajectory groups (DESIGN §2 step 6).

An agent takes a policy step only when its buffer holds a full micro-batch of query groups,
and then pops the most recent ones; agents routed more often therefore train more often (our
reading of the seed's "LIFO sample buffer" plus "micro-batch |Q_i| = 16"). With dynamic
sampling, groups whose G rewards are all equal are discarded as they are examined and the pop
reaches further down the stack to refill. Groups older than ``max_staleness`` policy versions
are dropped and counted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coevo_jax.rl import refill_from_lifo


@dataclasses.dataclass(frozen=True)
class Group:
    """G completions of one query by one agent.

    Attributes:
      agent_id: the agent that produced them.
      query_id: the record id.
      prompt_ids: prompt token ids (shared by the G completions).
      completions: G tuples of completion token ids.
      logprobs: G tuples of behaviour log-probs, aligned with ``completions``.
      rewards: G scalar rewards (length penalty included).
      version: policy version the completions were sampled under.
    """

    agent_id: int
    query_id: str
    prompt_ids: tuple[int, ...]
    completions: tuple[tuple[int, ...], ...]
    logprobs: tuple[tuple[float, ...], ...]
    rewards: tuple[float, ...]
    version: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Group:
        return cls(
            agent_id=int(d["agent_id"]),
            query_id=str(d["query_id"]),
            prompt_ids=tuple(d["prompt_ids"]),
            completions=tuple(tuple(c) for c in d["completions"]),
            logprobs=tuple(tuple(lp) for lp in d["logprobs"]),
            rewards=tuple(d["rewards"]),
            version=int(d["version"]),
        )


@dataclasses.dataclass
class PopReport:
    groups: list[Group]
    examined: int
    dropped_flat: int
    dropped_stale: int

    @property
    def kept_fraction(self) -> float:
        return len(self.groups) / self.examined if self.examined else 1.0


class LIFOBuffer:
    """One agent's stack of groups (top = most recent)."""

    def __init__(self, items: list[Group] | None = None):
        self.items: list[Group] = list(items or [])
        self.dropped_flat = 0
        self.dropped_stale = 0

    def __len__(self) -> int:
        return len(self.items)

    def push(self, groups: list[Group]) -> None:
        self.items.extend(groups)

    def drop_stale(self, current_version: int, max_staleness: int | None) -> int:
        """Removes groups sampled more than ``max_staleness`` versions ago; returns how many."""
        if max_staleness is None:
            return 0
        keep = [g for g in self.items if current_version - g.version <= max_staleness]
        n = len(self.items) - len(keep)
        self.items = keep
        self.dropped_stale += n
        return n

    def pop(self, target: int, *, dynamic_sampling: bool) -> PopReport | None:
        """Pops ``target`` most recent (informative, with dynamic sampling) groups.

        Returns None, leaving informative groups in place, when fewer than ``target`` are
        available; signal-free groups examined on the way are discarded either way.
        """
        if len(self.items) < target:
            return None
        if not dynamic_sampling:
            groups = self.items[-target:][::-1]
            del self.items[-target:]
            return PopReport(groups, target, 0, 0)
        groups, result = refill_from_lifo(self.items, target, lambda g: g.rewards)
        flat = len(result.dropped)
        self.dropped_flat += flat
        if result.short:
            self.items.extend(groups[::-1])  # put the informative ones back, in order
            return None
        return PopReport(groups, result.examined, flat, 0)

    def state_dict(self) -> dict[str, Any]:
        return {
            "items": [g.to_json() for g in self.items],
            "dropped_flat": self.dropped_flat,
            "dropped_stale": self.dropped_stale,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> LIFOBuffer:
        buf = cls([Group.from_json(g) for g in d["items"]])
        buf.dropped_flat = int(d["dropped_flat"])
        buf.dropped_stale = int(d["dropped_stale"])
        return buf
