"""Per-round metrics: ``metrics.jsonl`` (one JSON object per round) and TensorBoard events.

Each line is flushed and fsynced as it is written, so a crash loses at most the round in
flight; on resume the file is cut back to the checkpoint's round so a resumed run's file
equals an uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from coevo_jax.train.probe import mean_by_label

METRICS_FILE = "metrics.jsonl"


def to_jsonable(x: Any) -> Any:
    """Arrays and numpy scalars to lists/floats; non-finite floats to None."""
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return to_jsonable(np.asarray(x).tolist())
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsWriter:
    """Appends round records to ``metrics.jsonl`` and scalars to TensorBoard."""

    def __init__(self, run_dir: str | os.PathLike, *, tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self._tb = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except ImportError:  # optional: metrics.jsonl is the record of truth
                self._tb = None

    def truncate_after(self, round_idx: int) -> None:
        """Drops records of rounds > ``round_idx`` (used when resuming)."""
        kept = [m for m in read_metrics(self.run_dir) if m.get("round", -1) <= round_idx]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(m) + "\n" for m in kept))
        os.replace(tmp, self.path)

    def write(self, record: Mapping[str, Any]) -> None:
        rec = to_jsonable(record)
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self._tb is not None:
            step = int(rec.get("round", 0))
            for key, value in _flatten(rec).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flatten(v, key))
        elif (
            isinstance(v, list)
            and v
            and all(isinstance(x, (int, float)) for x in v)
            and len(v) <= 16
        ):
            for i, x in enumerate(v):
                out[f"{key}/{i}"] = x
        else:
            out[key] = v
    return out


def round_record(
    round_idx: int,
    system: Any,
    buffers: Sequence[Any],
    *,
    recs: list,
    f: np.ndarray,
    active: np.ndarray,
    rbar: np.ndarray,
    served: np.ndarray,
    rollouts: Any,  # train.rollouts.Rollouts
    mean_ent: np.ndarray,
    policy: dict[str, Any],
    gap: dict[str, Any] | None,
    selfcheck: dict[str, Any] | None,
    rm: dict[str, Any],
    timings: dict[str, float],
    probe: dict[str, Any] | None,
) -> dict[str, Any]:
    """Step 9: round ``round_idx``'s ``metrics.jsonl`` row, which the plots
    (``train.plots``), TensorBoard and the progress bar read. ``system`` is the
    ``train.system.System``, ``buffers`` the agents' LIFO buffers after the round."""
    n_agents = system.cfg.lora.n_agents
    by_class = mean_by_label(f, [str(r.get("class", "")) for r in recs])
    sizes = active.sum(axis=1)
    record = {
        "round": round_idx,
        "system_reward": float(rbar[served].mean()) if served.any() else 0.0,
        "agent_reward": [
            float(rbar[served[:, a], a].mean()) if served[:, a].any() else None
            for a in range(n_agents)
        ],
        "familiarity": {"mean": f.mean(axis=0).tolist(), "by_class": by_class},
        "activated": {
            "mean_per_query": float(sizes.mean()),
            "histogram": np.bincount(sizes, minlength=n_agents + 1)[1:].tolist(),
            "per_agent": active.sum(axis=0).tolist(),
        },
        "updates": system.agent_steps(),
        "versions": list(system.versions),
        "tokens_generated": int(sum(len(t.completion_ids) for _, t in rollouts.flat)),
        "entropy": mean_ent.tolist(),
        "buffers": [len(b) for b in buffers],
        "dropped_flat": [b.dropped_flat for b in buffers],
        "dropped_overflow": [b.dropped_overflow for b in buffers],
        "capped": system.capped().tolist(),
        "failures": rollouts.failures,
        "policy": policy,
        "gap": gap,
        "selfcheck": selfcheck,
        "server_restarts": system.server_restarts(),
        "router": {k: float(v) for k, v in jax.device_get(rm).items() if np.ndim(v) == 0},
        "counters": {
            "T": int(system.router.counters.T),
            "n": np.asarray(system.router.counters.n).tolist(),
        },
        "timings": timings,
    }
    if probe is not None:
        record["probe"] = probe
    return record
