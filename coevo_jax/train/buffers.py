"""Per-agent LIFO buffers of trajectory groups (docs/design.md §2 step 6).

An agent takes a policy step only when its buffer holds a full micro-batch of query groups,
and then pops the most recent ones; agents routed more often therefore train more often (our
reading of the CERA-MoA paper's "LIFO sample buffer" plus "micro-batch |Q_i| = 16"). With dynamic
sampling, groups whose G rewards are all equal are discarded as they are examined and the pop
reaches further down the stack to refill. Groups older than ``max_staleness`` policy versions
are dropped and counted. A buffer holds at most ``capacity`` groups: a push past it evicts
the oldest (bottom) groups, the ones a LIFO pop reaches last.

:class:`FeatureReservoir` keeps a bounded, uniform sample of the router features of every
routed query (for the t-SNE plot), however long the run.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

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
    """One agent's stack of groups (top = most recent), at most ``capacity`` deep (None:
    unbounded)."""

    def __init__(self, items: list[Group] | None = None, *, capacity: int | None = None):
        if capacity is not None and capacity < 1:
            raise ValueError(f"buffer capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.items: list[Group] = []
        self.dropped_flat = 0
        self.dropped_stale = 0
        self.dropped_overflow = 0
        self.push(list(items or []))

    def __len__(self) -> int:
        return len(self.items)

    def push(self, groups: list[Group]) -> None:
        self.items.extend(groups)
        if self.capacity is not None and len(self.items) > self.capacity:
            over = len(self.items) - self.capacity
            del self.items[:over]
            self.dropped_overflow += over

    def clear(self) -> int:
        """Empties the buffer (an agent that will never step again); returns how many went."""
        n = len(self.items)
        self.items = []
        return n

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
            "dropped_overflow": self.dropped_overflow,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any], *, capacity: int | None = None) -> LIFOBuffer:
        buf = cls([Group.from_json(g) for g in d["items"]], capacity=capacity)
        buf.dropped_flat = int(d["dropped_flat"])
        buf.dropped_stale = int(d["dropped_stale"])
        buf.dropped_overflow += int(d.get("dropped_overflow", 0))  # absent before capacities
        return buf


class FeatureReservoir:
    """A uniform sample of at most ``capacity`` (feature, agent, label) rows of a stream.

    Algorithm R: the i-th row offered (0-based) fills slot i while ``i < capacity``, then
    replaces slot ``j`` when ``j = U[0, i]`` falls below ``capacity``. The draw for row i
    comes from ``numpy.random.default_rng([seed, i])``, so the sample depends only on the
    stream and the seed, and a restored reservoir continues exactly as an uninterrupted one.
    Memory is ``capacity * (dim * 2 + 4 + label bytes)`` whatever the stream's length.

    Attributes:
      h: ``[capacity, dim]`` float16 features (rows ``>= len(self)`` are unused).
      agent: ``[capacity]`` int32 routed agent.
      label: ``[capacity]`` str label (the record's class), at most ``label_len`` characters.
      seen: rows offered so far.
    """

    def __init__(self, capacity: int, dim: int, *, seed: int = 0, label_len: int = 32):
        if capacity < 1 or dim < 1:
            raise ValueError(f"capacity and dim must be >= 1, got {capacity}, {dim}")
        self.capacity, self.dim, self.seed = capacity, dim, seed
        self.h = np.zeros((capacity, dim), np.float16)
        self.agent = np.zeros(capacity, np.int32)
        self.label = np.zeros(capacity, f"<U{label_len}")
        self.seen = 0

    def __len__(self) -> int:
        return min(self.seen, self.capacity)

    def add(self, h: np.ndarray, agent: np.ndarray, label: list[str] | np.ndarray) -> None:
        """Offers ``B`` rows: ``h [B, dim]``, ``agent [B]`` int, ``label [B]`` str."""
        h = np.asarray(h)
        if h.ndim != 2 or h.shape[1] != self.dim:
            raise ValueError(f"features must be [B, {self.dim}], got {h.shape}")
        agent = np.asarray(agent)
        if agent.shape != (h.shape[0],) or len(label) != h.shape[0]:
            raise ValueError(f"{h.shape[0]} features, {agent.shape} agents, {len(label)} labels")
        for k in range(h.shape[0]):
            i = self.seen
            slot = (
                i
                if i < self.capacity
                else int(np.random.default_rng([self.seed, i]).integers(0, i + 1))
            )
            if slot < self.capacity:
                self.h[slot] = h[k]
                self.agent[slot] = agent[k]
                self.label[slot] = label[k]
            self.seen += 1

    def arrays(self) -> dict[str, np.ndarray]:
        """The filled rows: ``h``, ``agent``, ``cls`` (as plots read them) and ``seen``."""
        n = len(self)
        return {
            "h": self.h[:n],
            "agent": self.agent[:n],
            "cls": self.label[:n],
            "seen": np.asarray(self.seen, np.int64),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Writes :meth:`arrays` (plus capacity and seed) to ``path`` (.npz) atomically."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp.npz")
        np.savez(
            tmp,
            **self.arrays(),
            capacity=np.asarray(self.capacity, np.int64),
            seed=np.asarray(self.seed, np.int64),
        )
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FeatureReservoir:
        """The reservoir :meth:`save` wrote (raises naming ``path`` when a field is missing)."""
        with np.load(path) as z:
            missing = {"h", "agent", "cls", "seen", "capacity", "seed"} - set(z.files)
            if missing:
                raise ValueError(f"{path}: not a feature reservoir, missing {sorted(missing)}")
            h = z["h"]
            out = cls(int(z["capacity"]), h.shape[1], seed=int(z["seed"]))
            n = h.shape[0]
            out.h[:n], out.agent[:n] = h, z["agent"]
            out.label = out.label.astype(z["cls"].dtype if n else out.label.dtype)
            out.label[:n] = z["cls"]
            out.seen = int(z["seen"])
        return out
