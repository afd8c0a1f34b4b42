"""The HTTP rollout engine: vLLM's OpenAI-compatible protocol, to vLLM or our own server.

``publish`` writes the adapter in PEFT format to a **new** directory ``agent{i}-v{k}`` and loads
it under that new name (vLLM's prefix cache keys on (name, path), so reusing a name would
serve stale KV blocks), then unloads the previous version once no request in flight uses it.

``generate`` packs requests that share an agent and sampling settings into one
``/v1/completions`` call (``prompt`` = a list of token-id lists, up to ``max_prompts_per_call``)
and runs calls concurrently from a bounded thread pool.

Faults: connection errors, timeouts and 5xx are retried with exponential backoff. A 404 for an
adapter name means the server lost it (typically a restart): the engine waits for ``/health``,
re-loads every adapter that should be live from its directory, and retries. When the engine
owns its server (``server``, a :class:`~rollout_bridge.launcher.ManagedServer`) and that server
is dead (its process exited, or ``/health`` answers 5xx, as vLLM does once its engine core
died), the first thread to notice restarts it and re-publishes every live adapter; the others
retry against the new server. A retried call replaces the whole call's output, so nothing is
lost or duplicated. A call that fails for good is reported in a ``GenerationError`` with its
query ids, never turned into output.

``prompt_logprobs`` is never sent with an adapter: under concurrency it kills vLLM's engine
(its LoRA logits processor fails to broadcast), and :meth:`HTTPEngine._post` refuses it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from coevo_jax.lora import AgentLoRA, LoRAWeights, export_peft, unstack
from rollout_bridge.engine import FailedRequest, GenerationError, GenerationRequest, Trajectory


class ServerUnavailable(Exception):
    """The server gave no usable answer: connection refused or reset, timeout, or a 5xx."""


class AdapterMissing(Exception):
    """The server answered 404 for the adapter name: it lost it (typically a restart)."""


def _mix_seeds(seeds: Sequence[int]) -> int:
    digest = hashlib.blake2b(repr(tuple(seeds)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def make_live(
    live: dict[int, tuple[str, str, int]],
    retired: list[str],
    agent_id: int,
    entry: tuple[str, str, int],
) -> None:
    """Records ``entry`` (name, path, version) as ``agent_id``'s live adapter, and the name
    it replaces as retired (unloaded once no call holds it). The caller holds the lock."""
    prev = live.get(agent_id)
    live[agent_id] = entry
    if prev is not None and prev[0] != entry[0]:
        retired.append(prev[0])


class HTTPEngine:
    """Rollouts from a vLLM-protocol server.

    Args:
      url: server base URL, e.g. ``http://127.0.0.1:8000``.
      base_model: the name the server's base model answers to (agent -1), also recorded as
        ``base_model_name_or_path`` in exported adapters.
      adapter_dir: where versioned adapter directories are written (the server must see it).
      family: model family for the PEFT export (``phi3`` fuses qkv / gate_up).
      timeout: seconds per HTTP call.
      retries: attempts per call beyond the first.
      backoff: first retry delay in seconds (doubles each time).
      max_concurrency: calls in flight at once.
      max_prompts_per_call: prompts packed into one completions call.
      on_request: optional ``(path, json_body)`` hook called before each POST (validation,
        logging).
      server: the server this engine owns: restarted when it dies, stopped by :meth:`close`.
      name_prefix: prefix of adapter names, so engines sharing one server do not collide.
    """

    def __init__(
        self,
        url: str,
        *,
        base_model: str,
        adapter_dir: str | Path,
        eos_ids: Sequence[int] = (),
        family: str = "llama",
        timeout: float = 300.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_concurrency: int = 8,
        max_prompts_per_call: int = 32,
        on_request: Callable[[str, dict], None] | None = None,
        server: Any = None,
        name_prefix: str = "",
    ):
        self.url = url.rstrip("/")
        self.base_model = base_model
        self.adapter_dir = Path(adapter_dir)
        self.adapter_dir.mkdir(parents=True, exist_ok=True)
        self.eos_ids = tuple(eos_ids)
        self.family = family
        self.retries, self.backoff = retries, backoff
        self.max_prompts_per_call = max_prompts_per_call
        self.on_request = on_request
        self.client = httpx.Client(timeout=timeout)
        self.pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="rollout")
        self.live: dict[int, tuple[str, str, int]] = {}  # agent -> (name, path, version)
        self.retired: list[str] = []  # names waiting for their in-flight requests
        self.in_flight: dict[str, int] = {}
        self.lock = threading.Lock()
        # Recovery is one thread at a time: after a restart every in-flight call fails at
        # once, and concurrent re-loads of one name race ("already loaded" -> unload ->
        # another thread's call gets 404), which exhausted the retries against real vLLM.
        self._recover_lock = threading.Lock()
        self.epoch = 0  # completed recoveries; a call that began before one just retries
        self.republished = 0
        self.retried = 0
        self.server = server
        self.name_prefix = name_prefix

    # ------------------------------------------------------------------ HTTP helpers
    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        if body.get("prompt_logprobs") is not None and body.get("model") != self.base_model:
            raise ValueError("prompt_logprobs with an adapter kills vLLM's engine; not sent")
        if self.on_request is not None:
            self.on_request(path, body)
        return self.client.post(self.url + path, json=body)

    def health(self) -> bool:
        try:
            return self.client.get(self.url + "/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _health_status(self) -> int | None:
        try:
            return self.client.get(self.url + "/health", timeout=5.0).status_code
        except httpx.HTTPError:
            return None

    @property
    def server_restarts(self) -> int:
        return 0 if self.server is None else self.server.restarts

    def server_dead(self) -> bool:
        """A dead owned server: exited, or alive but reporting an unhealthy engine (5xx).
        A slow ``/health`` under load is not death."""
        if self.server is None:
            return False
        if not self.server.alive():
            return True
        status = self._health_status()
        return status is not None and status >= 500

    def _restart_server(self, seen: int) -> None:
        if self.server.restart(seen=seen):
            self.recover()

    def _served(self) -> set[str] | None:
        """Names the server serves now (``/v1/models``), or None when it cannot tell."""
        try:
            r = self.client.get(self.url + "/v1/models", timeout=10.0)
            if r.status_code == 200:
                return {m["id"] for m in r.json()["data"]}
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        return None

    def wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health():
                return
            time.sleep(0.25)
        raise TimeoutError(f"{self.url}/health did not answer within {timeout:.0f} s")

    def load_adapter(self, name: str, path: str) -> None:
        """Loads the PEFT directory ``path`` under ``name`` (replacing a name already taken)."""
        self._load(name, path)

    def unload_adapter(self, name: str) -> None:
        """Unloads ``name``; a server that has already forgotten it is fine."""
        self._unload(name)

    def set_live(self, live: dict[int, tuple[str, str, int]]) -> None:
        """Replaces what should be live (agent -> (name, path, version)); :meth:`recover`
        loads it. A fleet keeps its members' lists this way."""
        with self.lock:
            self.live = dict(live)

    def _load(self, name: str, path: str) -> None:
        for attempt in range(self.retries + 1):
            try:
                r = self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            except httpx.HTTPError:
                r = None
            if r is not None and r.status_code == 200:
                return
            if r is not None and r.status_code == 400 and "already" in r.text:
                # The name is taken, perhaps by other weights (a resumed run repeats version
                # numbers; another client used the server): replace it, never trust it.
                self._unload(name)
                continue
            if r is not None and r.status_code < 500:
                raise RuntimeError(
                    f"loading adapter {name} from {path} failed: {r.status_code} {r.text}"
                )
            time.sleep(self.backoff * 2**attempt)
        raise RuntimeError(f"loading adapter {name} failed after {self.retries + 1} attempts")

    def _unload(self, name: str) -> None:
        try:
            self._post("/v1/unload_lora_adapter", {"lora_name": name})
        except httpx.HTTPError:
            pass  # a restarted server has already forgotten it

    def _reap(self) -> None:
        with self.lock:
            idle = [n for n in self.retired if self.in_flight.get(n, 0) == 0]
            self.retired = [n for n in self.retired if n not in idle]
        for name in idle:
            self._unload(name)

    # ------------------------------------------------------------------ Engine API
    def publish(self, agent_id: int, adapters: AgentLoRA | LoRAWeights, version: int) -> None:
        agent = unstack(adapters, agent_id) if isinstance(adapters, LoRAWeights) else adapters
        name = f"{self.name_prefix}agent{agent_id}-v{version}"
        path = self.adapter_dir / name
        export_peft(agent, None, path, base_model=self.base_model, family=self.family)
        self._load(name, str(path))
        with self.lock:
            make_live(self.live, self.retired, agent_id, (name, str(path), int(version)))
        self._reap()

    def recover(self, seen: int | None = None) -> None:
        """After a server restart or a lost adapter: wait for health, then load every adapter
        that should be live and is not served.

        Args:
          seen: the :attr:`epoch` the caller saw when its call began; when another thread
            has recovered since, this returns at once and the caller just retries.
        """
        with self._recover_lock:
            if seen is not None and seen != self.epoch:
                return
            self.wait_healthy()
            served = self._served()
            with self.lock:
                live = list(self.live.values())
            for name, path, _ in live:
                if served is None or name not in served:
                    self._load(name, path)
            self.epoch += 1
            self.republished += 1

    def _body(self, chunk: list[GenerationRequest], name: str) -> dict[str, Any]:
        first = chunk[0]
        return {
            "model": name,
            "prompt": [list(r.prompt_ids) for r in chunk],
            "n": first.n,  # one prompt's n samples in one call: the server prefills it once
            "max_tokens": first.max_tokens,
            "temperature": first.temperature,
            "top_p": first.top_p,
            "seed": _mix_seeds([r.seed for r in chunk]),
            "stop_token_ids": sorted(set(first.stop_ids) | set(self.eos_ids)),
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }

    def served(self, agent_id: int) -> tuple[str, int]:
        """``(model name, version)`` a call for ``agent_id`` uses now (-1: the base model)."""
        if agent_id < 0:
            return self.base_model, 0
        with self.lock:
            name, _, version = self.live.get(agent_id, (self.base_model, "", 0))
        return name, version

    def send(self, chunk: list[GenerationRequest], name: str, version: int) -> list[Trajectory]:
        """One completions call for ``chunk`` (requests sharing agent and sampling settings)
        under model ``name``, labelled ``version``; no retry.

        Raises:
          ServerUnavailable: connection error, timeout or 5xx.
          AdapterMissing: 404 (the server does not hold ``name``).
          RuntimeError: any other rejection, or a malformed answer.
        """
        t0 = time.perf_counter()
        try:
            r = self._post("/v1/completions", self._body(chunk, name))
        except httpx.HTTPError as e:
            raise ServerUnavailable(f"{self.url}: {type(e).__name__}: {e}") from e
        if r.status_code == 404:
            raise AdapterMissing(r.text)
        if r.status_code >= 500:
            raise ServerUnavailable(f"{self.url}: {r.status_code} {r.text[:200]}")
        if r.status_code != 200:
            raise RuntimeError(f"completions call rejected: {r.status_code} {r.text[:500]}")
        return self._parse(chunk, r.json(), version, time.perf_counter() - t0)

    def _call(self, chunk: list[GenerationRequest]) -> list[Trajectory]:
        for attempt in range(self.retries + 1):
            generation = self.server.generation if self.server is not None else 0
            epoch = self.epoch
            name, version = self.served(chunk[0].agent_id)
            with self.lock:
                self.in_flight[name] = self.in_flight.get(name, 0) + 1
            try:
                return self.send(chunk, name, version)
            except AdapterMissing:
                self.retried += 1
                if attempt == self.retries:
                    raise
                self.recover(seen=epoch)
            except ServerUnavailable:
                self.retried += 1
                if attempt == self.retries:
                    raise
                if self.server_dead():
                    self._restart_server(generation)
                    continue
                time.sleep(self.backoff * 2**attempt)
                if not self.health():
                    try:
                        self.recover(seen=epoch)
                    except TimeoutError:
                        pass
            finally:
                with self.lock:
                    self.in_flight[name] -= 1
        raise RuntimeError("unreachable")

    @staticmethod
    def _parse(
        chunk: list[GenerationRequest], resp: dict, version: int, seconds: float
    ) -> list[Trajectory]:
        n = chunk[0].n
        choices = sorted(resp["choices"], key=lambda c: c["index"])
        if len(choices) != n * len(chunk):
            raise RuntimeError(f"expected {n * len(chunk)} choices, got {len(choices)}")
        out = []
        for c in choices:
            req = chunk[c["index"] // n]
            ids = c.get("token_ids")
            lp = (c.get("logprobs") or {}).get("token_logprobs")
            if ids is None or lp is None:
                raise RuntimeError(
                    "server did not return token ids and log-probs (needs return_token_ids, logprobs: 0)"
                )
            out.append(
                Trajectory(
                    prompt_ids=tuple(req.prompt_ids),
                    completion_ids=tuple(int(t) for t in ids),
                    logprobs=tuple(float(x) for x in lp),
                    finish_reason=c.get("finish_reason") or "length",
                    agent_id=req.agent_id,
                    version=version,
                    query_id=req.query_id,
                    sample_index=c["index"] % n,
                    seconds=seconds,
                )
            )
        return out

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Trajectory]:
        groups: dict[tuple, list[GenerationRequest]] = {}
        for r in requests:
            key = (r.agent_id, r.n, r.max_tokens, r.temperature, r.top_p, tuple(sorted(r.stop_ids)))
            groups.setdefault(key, []).append(r)
        chunks = [
            g[i : i + self.max_prompts_per_call]
            for g in groups.values()
            for i in range(0, len(g), self.max_prompts_per_call)
        ]
        futures = [(c, self.pool.submit(self._call, c)) for c in chunks]
        trajs: list[Trajectory] = []
        failures: list[FailedRequest] = []
        for chunk, fut in futures:
            try:
                trajs += fut.result()
            except Exception as e:  # reported to the caller with the query ids, never zero-filled
                failures += [
                    FailedRequest(r.query_id, r.agent_id, f"{type(e).__name__}: {e}") for r in chunk
                ]
        self._reap()
        order = {r.query_id: k for k, r in enumerate(requests)}
        trajs.sort(key=lambda t: (order.get(t.query_id, 0), t.sample_index))
        if failures:
            raise GenerationError(failures, trajs)
        return trajs

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.client.close()
        if self.server is not None:
            self.server.stop()
