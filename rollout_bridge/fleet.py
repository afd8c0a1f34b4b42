"""A fleet of vLLM-protocol servers for one base model, behind the Engine interface.

:class:`FleetEngine` wraps one :class:`~rollout_bridge.http_engine.HTTPEngine` per server
(its *members*; they share the base model, adapter directory and name prefix) and is itself
an Engine (docs/design.md §6):

- **Balancing.** Each unit of work is one completions call: one prompt with its ``n``
  samples (``max_prompts_per_call`` packs more). A unit goes to the *up* member with the
  least work in flight, counted as prompt tokens plus requested tokens (``max_tokens x n``)
  of the calls it holds. At most ``max_concurrency`` calls per member are in flight, so a
  slow server keeps its work longer and is offered less.
- **One request per group.** A request's ``n`` samples go in one call with ``n``, so the
  server holds the prompt once (vLLM prefills it once; the local server batches the rows).
- **Publishing.** An adapter is exported once and loaded on every up member concurrently;
  only then do new calls use it. Each call pins the (name, version) it was dispatched with,
  and a retired version is unloaded once no call holds it.
- **Failover.** A member whose call fails with a connection error, timeout, 5xx or a lost
  adapter is taken out of rotation and its call goes to another member. A doctor thread
  restarts the member's server when the fleet owns it (``HTTPEngine(server=...)``; counted
  in :attr:`FleetEngine.server_restarts`) or waits for it to answer ``/health`` again, then
  re-loads every live adapter before the member takes work again. A unit returns its
  trajectories only from a call that succeeded, so nothing is lost or sent twice;
  :func:`merge_unique` still keeps one trajectory per (request, sample index) as a guard.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coevo_jax.lora import AgentLoRA, LoRAWeights, export_peft, unstack
from rollout_bridge.engine import FailedRequest, GenerationError, GenerationRequest, Trajectory
from rollout_bridge.http_engine import (
    AdapterMissing,
    HTTPEngine,
    ServerUnavailable,
    make_live,
)


class _Member:
    """One server's client and the fleet's bookkeeping of it (guarded by the fleet's lock)."""

    def __init__(self, engine: HTTPEngine, index: int):
        self.engine, self.index = engine, index
        self.up = True
        self.work = 0  # prompt + requested tokens of the calls it holds now
        self.calls = 0  # calls it holds now
        self.tokens_sent = 0  # cumulative work dispatched to it
        self.calls_sent = 0
        self.failures = 0
        self.doctor: threading.Thread | None = None


def unit_work(chunk: Sequence[GenerationRequest]) -> int:
    """The work one call holds on a server: its prompt tokens plus its requested tokens."""
    return sum(len(r.prompt_ids) + r.max_tokens * r.n for r in chunk)


def least_work(members: Sequence[Any], cap: int) -> Any | None:
    """The up member with the least work in flight among those holding fewer than ``cap``
    calls (ties: the least work sent so far, then the lowest index); None if there is none."""
    free = [m for m in members if m.up and m.calls < cap]
    if not free:
        return None
    return min(free, key=lambda m: (m.work, m.tokens_sent, m.index))


def merge_unique(
    requests: Sequence[GenerationRequest], parts: Sequence[Sequence[Trajectory]]
) -> tuple[list[Trajectory], int]:
    """Trajectories of ``parts``, one per (query id, sample index), in request order, and
    how many duplicates were dropped. When the requests' query ids are not unique they
    cannot name a trajectory, so nothing is dropped and the order is that of ``parts``."""
    ids = [r.query_id for r in requests]
    pos = {q: k for k, q in enumerate(ids)}
    by_id = len(pos) == len(ids)
    seen: set[tuple] = set()
    out: list[Trajectory] = []
    for p, part in enumerate(parts):
        for j, t in enumerate(part):
            key = (t.query_id, t.sample_index) if by_id else (p, j)
            if key not in seen:
                seen.add(key)
                out.append(t)
    if by_id:
        out.sort(key=lambda t: (pos.get(t.query_id, len(ids)), t.sample_index))
    return out, sum(map(len, parts)) - len(out)


class ServerSet:
    """The K started servers of one base model, stopped together (what a run keeps per base
    model so that every agent group on it shares them)."""

    def __init__(self, servers: Sequence[Any]):
        self.servers = list(servers)

    @property
    def restarts(self) -> int:
        return sum(int(s.restarts) for s in self.servers)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


class FleetEngine:
    """An Engine over several servers of one base model (see the module docstring).

    Args:
      members: one HTTPEngine per server, sharing ``base_model``, ``adapter_dir``,
        ``family`` and ``name_prefix``; an owned server (``server=``) is restarted when it
        dies. Construct them with few ``retries``: the fleet fails over instead.
      max_concurrency: calls in flight per member.
      max_prompts_per_call: prompts packed into one call (1: balance per prompt).
      max_resends: times one call may be re-sent after a member failed it.
      down_timeout: seconds a call waits for some member to be up before it fails for good.
      heal_interval: seconds between a doctor's attempts to bring a member back.
    """

    def __init__(
        self,
        members: Sequence[HTTPEngine],
        *,
        max_concurrency: int = 8,
        max_prompts_per_call: int = 1,
        max_resends: int = 6,
        down_timeout: float = 900.0,
        heal_interval: float = 1.0,
    ):
        if not members:
            raise ValueError("a fleet needs at least one server")
        first = members[0]
        for m in members[1:]:
            same = (m.base_model, m.adapter_dir, m.family, m.name_prefix)
            if same != (first.base_model, first.adapter_dir, first.family, first.name_prefix):
                raise ValueError("fleet members must share base model, adapter dir and prefix")
        self.members = [_Member(e, k) for k, e in enumerate(members)]
        self.base_model, self.adapter_dir = first.base_model, first.adapter_dir
        self.family, self.name_prefix = first.family, first.name_prefix
        self.cap, self.max_prompts_per_call = max_concurrency, max_prompts_per_call
        self.max_resends, self.down_timeout = max_resends, down_timeout
        self.heal_interval = heal_interval
        self.live: dict[int, tuple[str, str, int]] = {}  # agent -> (name, path, version)
        self.retired: list[str] = []
        self.in_flight: dict[str, int] = {}  # calls holding each adapter name
        self.lock = threading.Condition()
        # Held while loading a new version on every member and while a recovered member
        # loads the live set, so a member never comes back without the newest version.
        self.publish_lock = threading.Lock()
        workers = max_concurrency * len(members)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet")
        self.loader = ThreadPoolExecutor(max_workers=len(members), thread_name_prefix="publish")
        self.resent = 0
        self.duplicates_dropped = 0
        self.closed = False

    # ------------------------------------------------------------------ metrics
    @property
    def server_restarts(self) -> int:
        """Restarts of the servers the members own (each distinct server counted once)."""
        servers = {id(m.engine.server): m.engine.server for m in self.members}
        return sum(int(s.restarts) for s in servers.values() if s is not None)

    def stats(self) -> list[dict[str, Any]]:
        """Per member: url, up, tokens and calls dispatched, failures seen."""
        with self.lock:
            return [
                {
                    "url": m.engine.url,
                    "up": m.up,
                    "tokens_sent": m.tokens_sent,
                    "calls_sent": m.calls_sent,
                    "failures": m.failures,
                }
                for m in self.members
            ]

    # ------------------------------------------------------------------ publish
    def publish(self, agent_id: int, adapters: AgentLoRA | LoRAWeights, version: int) -> None:
        """Exports the adapter once, loads it on every up member, then makes it live."""
        agent = unstack(adapters, agent_id) if isinstance(adapters, LoRAWeights) else adapters
        name = f"{self.name_prefix}agent{agent_id}-v{version}"
        path = self.adapter_dir / name
        export_peft(agent, None, path, base_model=self.base_model, family=self.family)
        with self.publish_lock:
            with self.lock:
                up = [m for m in self.members if m.up]
            futures = [(m, self.loader.submit(m.engine.load_adapter, name, str(path))) for m in up]
            for m, fut in futures:
                try:
                    fut.result()
                except Exception:
                    if m.engine.health():
                        raise  # the server answered and refused the adapter: not a fault
                    self._mark_down(m, "adapter load failed")  # its doctor loads it later
            with self.lock:
                make_live(self.live, self.retired, agent_id, (name, str(path), int(version)))
        self._reap()

    def _reap(self) -> None:
        """Unloads retired names that no call holds, from every up member."""
        with self.lock:
            idle = [n for n in self.retired if self.in_flight.get(n, 0) == 0]
            self.retired = [n for n in self.retired if n not in idle]
            up = [m for m in self.members if m.up]
        for name in idle:
            for m in up:
                m.engine.unload_adapter(name)

    # ------------------------------------------------------------------ failover
    def _mark_down(self, m: _Member, why: str) -> None:
        with self.lock:
            m.failures += 1
            if not m.up or self.closed:
                return
            m.up = False
            m.doctor = threading.Thread(target=self._heal, args=(m,), daemon=True)
            m.doctor.start()
        print(f"fleet: {m.engine.url} out of rotation ({why})", file=sys.stderr, flush=True)

    def _heal(self, m: _Member) -> None:
        """Brings ``m`` back: restart (owned and dead) or wait for health, then re-load the
        live adapters, then put it back in rotation."""
        eng = m.engine
        while not self.closed:
            try:
                if eng.server is not None and eng.server_dead():
                    eng.server.restart(seen=eng.server.generation)
                if not eng.health():
                    time.sleep(self.heal_interval)
                    continue
                with self.publish_lock:
                    with self.lock:
                        eng.set_live(self.live)
                    eng.recover()
                    with self.lock:
                        m.up = True
                        self.lock.notify_all()
                print(f"fleet: {eng.url} back in rotation", file=sys.stderr, flush=True)
                return
            except Exception as e:  # a failed restart or re-load: try again later
                print(f"fleet: {eng.url} not back yet: {e}", file=sys.stderr, flush=True)
                time.sleep(self.heal_interval)

    # ------------------------------------------------------------------ generate
    def _acquire(self, work: int, agent_id: int) -> tuple[_Member, str, int]:
        """Waits for a member with room, charges it ``work`` and pins the adapter name."""
        deadline = time.monotonic() + self.down_timeout
        with self.lock:
            while (m := least_work(self.members, self.cap)) is None:
                if self.closed or time.monotonic() > deadline:
                    raise ServerUnavailable("no server of the fleet is up")
                self.lock.wait(timeout=1.0)
            m.work += work
            m.calls += 1
            m.tokens_sent += work
            m.calls_sent += 1
            if agent_id < 0:
                name, version = self.base_model, 0
            else:
                name, _, version = self.live.get(agent_id, (self.base_model, "", 0))
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
            return m, name, version

    def _release(self, m: _Member, work: int, name: str) -> None:
        with self.lock:
            m.work -= work
            m.calls -= 1
            self.in_flight[name] -= 1
            self.lock.notify_all()

    def _run(self, chunk: list[GenerationRequest]) -> list[Trajectory]:
        """One call, re-sent to another member when the one it went to fails."""
        work = unit_work(chunk)
        for attempt in range(self.max_resends + 1):
            m, name, version = self._acquire(work, chunk[0].agent_id)
            try:
                return m.engine.send(chunk, name, version)
            except (ServerUnavailable, AdapterMissing) as e:
                self._mark_down(m, f"{type(e).__name__}: {str(e)[:120]}")
                if attempt == self.max_resends:
                    raise
                with self.lock:
                    self.resent += 1
            finally:
                self._release(m, work, name)
        raise RuntimeError("unreachable")

    def _chunks(self, requests: Sequence[GenerationRequest]) -> list[list[GenerationRequest]]:
        groups: dict[tuple, list[GenerationRequest]] = {}
        for r in requests:
            key = (r.agent_id, r.n, r.max_tokens, r.temperature, r.top_p, tuple(sorted(r.stop_ids)))
            groups.setdefault(key, []).append(r)
        k = self.max_prompts_per_call
        return [g[i : i + k] for g in groups.values() for i in range(0, len(g), k)]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Trajectory]:
        futures = [(c, self.pool.submit(self._run, c)) for c in self._chunks(requests)]
        parts: list[list[Trajectory]] = []
        failures: list[FailedRequest] = []
        for chunk, fut in futures:
            try:
                parts.append(fut.result())
            except Exception as e:  # reported with the query ids, never zero-filled
                failures += [
                    FailedRequest(r.query_id, r.agent_id, f"{type(e).__name__}: {e}") for r in chunk
                ]
        self._reap()
        trajs, dropped = merge_unique(requests, parts)
        self.duplicates_dropped += dropped
        if failures:
            raise GenerationError(failures, trajs)
        return trajs

    def close(self) -> None:
        """Stops dispatching, waits for the doctors, closes every member (and its server)."""
        with self.lock:
            self.closed = True
            self.lock.notify_all()
        self.pool.shutdown(wait=True)
        self.loader.shutdown(wait=True)
        for m in self.members:
            if m.doctor is not None:
                m.doctor.join(timeout=60.0)
        for m in self.members:
            m.engine.close()
