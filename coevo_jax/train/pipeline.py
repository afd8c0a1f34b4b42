"""Generation overlapped with training (``loop.async_rollouts``).

With the option on, the loop routes round r+1 and starts its generation on a background
thread right after round r's rewards, then runs round r's policy and router steps while the
engines generate. A round then takes about the longer of generating and training, not their
sum.

What that changes, and why it stays exact:
- Round r+1 is routed with the router as it stands then, before round r's router step (the
  heads of round r-1's update); its features, familiarity and activation are kept with it,
  and round r+1's router step learns from them.
- Round r+1 samples with the adapters published before round r's policy step: the loop
  publishes round r's new adapters only once that generation has finished. Its groups are
  therefore one version behind when round r+1 trains on them (``rollout.max_staleness``
  must allow 1); the ratio against the engine's behaviour log-probs (or the trainer's
  recompute with ``rl.behavior_logprobs: recompute`` and ``rl.is_cap``) corrects for it.
- Every request's seed is fixed by the run's seed, the round, the record and the agent, and
  the adapters it samples with are fixed as above, so the pipelined run is deterministic.
  A checkpoint taken with a round in flight waits for it and saves its trajectories
  (:func:`save_pending`); a resumed run takes them up again and equals the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass
class StartedRound:
    """A round that is routed and generating (or done generating).

    Attributes:
      round_idx: the round it belongs to.
      idx: ``[B]`` record indices drawn for it.
      h: ``[B, D]`` router features (a device array; host numpy after a restore).
      f, active: ``[B, N]`` familiarity and training activation, host arrays.
      route_s: the routing's wall time.
    """

    round_idx: int
    idx: list[int]
    h: Any
    f: np.ndarray
    active: np.ndarray
    route_s: float
    _result: tuple[list, list[str]] | None = None
    _error: BaseException | None = None
    _thread: threading.Thread | None = None
    generate_s: float = 0.0

    def generate(self, fn: Callable[[], tuple[list, list[str]]], background: bool) -> None:
        """Runs ``fn`` (the round's generation: ``(trajectories, failures)``) now, or on a
        background thread when ``background``."""

        def work() -> None:
            t0 = time.perf_counter()
            try:
                self._result = fn()
            except BaseException as e:  # re-raised in the loop's thread by wait()
                self._error = e
            self.generate_s = time.perf_counter() - t0

        if background:
            self._thread = threading.Thread(target=work, name="coevo-rollouts", daemon=True)
            self._thread.start()
        else:
            work()

    def wait(self) -> tuple[list, list[str]]:
        """``(trajectories, failures)`` once the generation has finished (re-raising its
        error, if it failed)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def save_pending(path: Path, started: StartedRound, h: np.ndarray) -> None:
    """Writes a finished in-flight round (its draw, routing and trajectories) to ``path``;
    ``h`` is its router features on the host (gathered from the mesh by the caller).

    Pickle, because trajectories are ragged host objects; the file sits beside the
    checkpoint that names it and is read back only by the same code (:func:`load_pending`).
    """
    trajs, failures = started.wait()
    payload = {
        "round_idx": started.round_idx,
        "idx": started.idx,
        "h": np.asarray(h),
        "f": started.f,
        "active": started.active,
        "route_s": started.route_s,
        "trajectories": trajs,
        "failures": failures,
        "generate_s": started.generate_s,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(payload))
    tmp.replace(path)


def load_pending(path: Path) -> StartedRound:
    """The in-flight round saved by :func:`save_pending`, finished."""
    p = pickle.loads(path.read_bytes())
    started = StartedRound(p["round_idx"], p["idx"], p["h"], p["f"], p["active"], p["route_s"])
    started._result = (p["trajectories"], p["failures"])
    started.generate_s = p["generate_s"]
    return started
