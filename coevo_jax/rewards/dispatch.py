"""One entry point for every verifier, and a batch scorer that never hangs the trainer.

:func:`score` dispatches on the record's class through the domain registry
(``coevo_jax.data.domains``; the built-ins are ``math | code | if | reasoning``) to the verifier
it names (``coevo_jax.rewards.verifiers``); a class that is not registered raises. A record is
a :class:`coevo_jax.data.Record` or any mapping with the same keys (``"class"`` or ``cls``).

:func:`score_batch` runs items in a pool of worker processes that it owns (not
``concurrent.futures``: that pool cannot kill one stuck task). Each item has a deadline, its
class's timeout plus ``grace_s``; a worker past it is SIGKILLed and replaced, and the item
scores 0. The sandbox and math verifiers keep their own, shorter clocks, so the kill is the
last resort (a C-level SymPy loop, an interpreter bug). Workers come from a ``forkserver``
that has already imported the verifiers, so a replacement starts in milliseconds and the
trainer's (JAX) process is never forked.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing.connection import wait
from typing import Any

from coevo_jax.data import domains
from coevo_jax.rewards import verifiers

log = logging.getLogger(__name__)

# What a verifier receives: the record's JSON form (docs/design.md §9) as a plain dict.
_RECORD_KEYS = ("id", "class", "problem", *domains.VERIFIER_FIELDS, "metadata")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Verifier settings.

    Attributes:
      math_timeout_s: wall clock of the SymPy stage of one math item.
      code_timeout_s: wall clock of one program (compile + all tests), docs/design.md §5: 10 s.
      code_strict: code reward 1 only if all tests pass (else the pass fraction).
      if_strict: IFEval reward 1 only if all instructions hold (else the fraction).
      if_loose: use IFEval's loose variant (also tries the response without its first/last
        line and without ``*``).
      grace_s: extra time before the batch pool kills a worker stuck on an item.
      if_timeout_s, reasoning_timeout_s: batch deadlines for those classes.
      default_timeout_s: batch deadline of a class without a ``<class>_timeout_s`` field.
    """

    math_timeout_s: float = 5.0
    code_timeout_s: float = 10.0
    code_strict: bool = False
    if_strict: bool = False
    if_loose: bool = False
    grace_s: float = 5.0
    if_timeout_s: float = 10.0
    reasoning_timeout_s: float = 5.0
    default_timeout_s: float = 5.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name.endswith("_s") and not v > 0:
                raise ValueError(f"RewardConfig.{f.name} must be > 0, got {v}")

    def timeout_for(self, cls: str) -> float:
        """The batch deadline of class ``cls`` (before ``grace_s``)."""
        return getattr(self, f"{cls}_timeout_s", self.default_timeout_s)


def _field(record: Any, key: str) -> Any:
    if isinstance(record, Mapping) or hasattr(record, "get"):
        value = record.get(key)
        if value is None and key == "class":
            value = record.get("cls")
        return value
    if key == "class":
        return getattr(record, "cls", None) or getattr(record, "klass", None)
    return getattr(record, key, None)


def record_class(record: Any) -> str:
    """The record's class; ``domains.UnknownClassError`` (a ``ValueError``) names the record
    and the class when it is not registered."""
    cls = _field(record, "class")
    return domains.get(cls, record_id=_field(record, "id")).name


def _plain_record(record: Any) -> dict[str, Any]:
    return {k: _field(record, k) for k in _RECORD_KEYS}


def _run(
    verify: verifiers.Verifier, rec: dict, completion: str, config: RewardConfig, *, isolate: bool
) -> float:
    try:
        return float(verify(rec, completion, config=config, isolate=isolate))
    except Exception as e:  # a verifier bug must cost one item, not the run
        log.warning("reward: record %r (%s) failed to score: %s", rec["id"], rec["class"], e)
        return 0.0


def score(
    record: Any, completion: str, *, config: RewardConfig = RewardConfig(), _in_worker=False
) -> float:
    """The reward of ``completion`` for ``record``, in [0, 1]; errors in verification score 0.

    A record whose class is not registered raises ``domains.UnknownClassError`` (a
    ``ValueError``: that is a data bug, not a bad completion), and so does a registered class
    whose verifier cannot be found (``verifiers.VerifierError``).
    """
    rec = _plain_record(record)
    verify = verifiers.verifier_for(record_class(record), record_id=rec["id"])
    return _run(verify, rec, completion, config, isolate=not _in_worker)


# --------------------------------------------------------------------------------------------
# The batch pool.


def _item(i: int, record: Any, completion: str | None) -> tuple[int, dict, str, str]:
    """A pool work item: index, plain record, completion, the class's verifier path."""
    rec = _plain_record(record)
    cls = record_class(record)
    verifiers.verifier_for(cls, record_id=rec["id"])  # fail here, not in a worker
    return i, rec, completion or "", domains.get(cls).verifier


def _worker_main(conn, config: RewardConfig) -> None:
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        idx, rec, completion, ref = msg
        try:
            verify = verifiers.resolve(ref)
        except verifiers.VerifierError as e:  # resolved in the parent, so not expected here
            log.warning("reward: record %r: %s", rec["id"], e)
            conn.send((idx, 0.0))
            continue
        conn.send((idx, _run(verify, rec, completion, config, isolate=False)))


class _Worker:
    def __init__(self, ctx, config: RewardConfig):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, config), daemon=True)
        self.proc.start()
        child.close()
        self.item: int | None = None
        self.deadline = 0.0

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()


def _context():
    from coevo_jax.rewards._isolate import forkserver_context

    return forkserver_context()


class RewardPool:
    """A reusable pool of reward workers: start it once per run, call :meth:`score` per step.

    Workers keep their SymPy caches and parsed gold answers between calls, and no call pays
    for starting processes. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, workers: int = 2, config: RewardConfig = RewardConfig()):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.config = config
        self._ctx = _context()
        self._workers = [_Worker(self._ctx, config) for _ in range(workers)]

    @property
    def workers(self) -> int:
        return len(self._workers)

    def score(
        self, records: Sequence[Any], completions: Sequence[str], *, progress: bool = False
    ) -> list[float]:
        """Scores ``completions[i]`` against ``records[i]``; see :func:`score_batch`."""
        if self._workers is None:
            raise RuntimeError("RewardPool is closed")
        if len(records) != len(completions):
            raise ValueError(f"{len(records)} records but {len(completions)} completions")
        n = len(records)
        results = [0.0] * n
        if n == 0:
            return results
        # Every class is looked up (and its verifier imported) here, before any work starts,
        # so an unknown class or a broken verifier path fails the call loudly.
        pending = deque(_item(i, r, completions[i]) for i, r in enumerate(records))
        pool, config = self._workers, self.config
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n, desc="rewards", unit="item")
        done = 0
        try:
            while done < n:
                for w in pool:
                    if w.item is None and pending:
                        i, rec, comp, ref = pending.popleft()
                        w.item = i
                        deadline = config.timeout_for(rec["class"]) + config.grace_s
                        w.deadline = time.monotonic() + deadline
                        w.conn.send((i, rec, comp, ref))
                busy = [w for w in pool if w.item is not None]
                timeout = max(0.0, min(w.deadline for w in busy) - time.monotonic())
                ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout)
                for k, w in enumerate(pool):
                    if w.item is None:
                        continue
                    finished = False
                    if w.conn in ready:
                        try:
                            idx, value = w.conn.recv()
                            results[idx] = float(value)
                            finished = True
                        except (EOFError, OSError):
                            pass
                    if finished:
                        w.item = None
                    elif w.proc.sentinel in ready or time.monotonic() >= w.deadline:
                        if w.proc.is_alive():
                            log.warning("reward: item %d timed out; worker killed", w.item)
                        else:
                            log.warning("reward: worker died on item %d", w.item)
                        w.kill()
                        pool[k] = _Worker(self._ctx, config)
                    else:
                        continue
                    done += 1
                    if bar is not None:
                        bar.update(1)
        finally:
            # an interrupted call leaves no half-answered worker behind
            for k, w in enumerate(pool):
                if w.item is not None:
                    w.kill()
                    pool[k] = _Worker(self._ctx, config)
            if bar is not None:
                bar.close()
        return results

    def close(self) -> None:
        if self._workers is None:
            return
        for w in self._workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._workers:
            w.proc.join(timeout=2.0)
            w.kill()
        self._workers = None

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def score_batch(
    records: Sequence[Any],
    completions: Sequence[str],
    *,
    workers: int = 2,
    config: RewardConfig = RewardConfig(),
    progress: bool = False,
    pool: RewardPool | None = None,
) -> list[float]:
    """Scores ``completions[i]`` against ``records[i]`` in ``workers`` processes.

    A pathological item costs its class's timeout (plus ``config.grace_s`` at worst) and a 0;
    it never stops the batch. Returns one float per item, in order. With ``pool`` the call
    reuses that :class:`RewardPool` (and its config); otherwise a pool lives for this call.
    """
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completions")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if pool is not None:
        return pool.score(records, completions, progress=progress)
    if not records:
        return []
    with RewardPool(min(workers, len(records)), config) as p:
        return p.score(records, completions, progress=progress)
