"""Batching of concurrent completion calls into shared sampler calls (the server side).

The protocol names one adapter per ``/v1/completions`` call, so the HTTP engine sends one call
per agent and runs them concurrently. vLLM batches concurrent requests in its scheduler; a
server that ran each call as its own sampler call would make A calls of B/A rows where the
in-process engine makes one of B rows, and on a CPU (or an under-filled accelerator) that costs
nearly A times the time. ``Batcher`` gives the local server the same behaviour at call
granularity: one worker thread takes the first pending job, waits ``wait_s`` for the calls
sent alongside it, and runs every compatible pending job (same ``key``: token budget and stop
set, which the sampler takes per batch; temperature, top-p, seed and adapter are per row) in
one sampler call of at most ``max_rows`` rows. The JAX sampler is a single compiled loop, so
calls that arrive while it runs join the next batch rather than the running one.

Hand-written because the batching unit is the project's own sampler call; nothing here is
specific to HTTP.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Job:
    """One call's share of a batch.

    Attributes:
      key: jobs with equal keys may share a sampler call.
      rows: number of sampler rows the job needs.
      payload: whatever ``run`` needs to build the job's rows.
      future: resolved with ``run``'s result for this job (or its exception).
    """

    key: Hashable
    rows: int
    payload: Any
    future: Future = field(default_factory=Future)


class Batcher:
    """Runs jobs through ``run(jobs) -> results`` (one result per job, same order) in batches.

    Args:
      run: executes a batch of compatible jobs in one sampler call.
      wait_s: how long the first job of a batch waits for companions.
      max_rows: row cap per batch (a single larger job runs alone).
    """

    def __init__(self, run: Callable[[list[Job]], Sequence[Any]], *, wait_s: float, max_rows: int):
        if wait_s < 0 or max_rows < 1:
            raise ValueError("wait_s must be >= 0 and max_rows >= 1")
        self.run, self.wait_s, self.max_rows = run, wait_s, max_rows
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.batches = 0  # sampler calls made (GET /metrics, tests)
        self.jobs = 0  # jobs served
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, job: Job) -> Future:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="batcher", daemon=True)
                self._thread.start()
        self.queue.put(job)
        return job.future

    def close(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                self.queue.put(None)
                self._thread.join()
                self._thread = None

    def _collect(self, first: Job) -> tuple[list[Job], bool]:
        pending, deadline = [first], time.monotonic() + self.wait_s
        while True:
            left = deadline - time.monotonic()
            try:
                job = self.queue.get(timeout=left) if left > 0 else self.queue.get_nowait()
            except queue.Empty:
                return pending, False
            if job is None:
                return pending, True
            pending.append(job)

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self.queue.get()
            if first is None:
                return
            pending, stop = self._collect(first)
            groups: dict[Hashable, list[Job]] = {}
            for job in pending:
                groups.setdefault(job.key, []).append(job)
            for jobs in groups.values():
                for batch in _pack(jobs, self.max_rows):
                    self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        self.batches += 1
        self.jobs += len(batch)
        try:
            results = self.run(batch)
        except BaseException as e:  # noqa: BLE001 - delivered to every waiting caller
            for job in batch:
                job.future.set_exception(e)
            return
        for job, res in zip(batch, results, strict=True):
            if isinstance(res, BaseException):
                job.future.set_exception(res)
            else:
                job.future.set_result(res)


def _pack(jobs: list[Job], max_rows: int) -> list[list[Job]]:
    """Consecutive batches of whole jobs with at most ``max_rows`` rows (arrival order kept)."""
    batches: list[list[Job]] = []
    cur: list[Job] = []
    rows = 0
    for job in jobs:
        if cur and rows + job.rows > max_rows:
            batches.append(cur)
            cur, rows = [], 0
        cur.append(job)
        rows += job.rows
    if cur:
        batches.append(cur)
    return batches
