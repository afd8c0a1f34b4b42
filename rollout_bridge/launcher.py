"""Starting rollout servers: vLLM with runtime LoRA, or the project's own local server.

``vllm_command`` builds the exact ``vllm serve`` invocation the bridge relies on (runtime LoRA
loading, rank limit, processed log-probs); ``start_server`` runs any server command as a child
process in its own process group, waits for ``/health`` and returns a handle that stops it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts for ``--max-lora-rank`` that holds ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's maximum {VLLM_LORA_RANKS[-1]}")


def vllm_command(
    model: str,
    *,
    agents: int,
    max_lora_rank: int = 16,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    extra: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` for ``vllm serve`` with runtime LoRA updating (docs/design.md §6)."""
    argv = [
        "vllm", "serve", model,
        "--enable-lora",
        "--max-loras", str(agents),
        "--max-lora-rank", str(vllm_max_lora_rank(max_lora_rank)),
        "--logprobs-mode", "processed_logprobs",
        "--host", host,
        "--port", str(port),
    ]  # fmt: skip
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += list(extra)
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
    return argv, env


def local_command(
    *,
    model: str | None = None,
    random_config: str | None = None,
    agents: int = 4,
    max_lora_rank: int = 16,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    extra: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` for the project's own server in a child Python process (``extra``:
    more ``rollout_bridge.server`` flags, e.g. ``--batch-wait-ms``)."""
    argv = [sys.executable, "-m", "rollout_bridge.server", "--host", host, "--port", str(port),
            "--max-loras", str(agents), "--max-lora-rank", str(max_lora_rank)]  # fmt: skip
    if model:
        argv += ["--model", model]
    if random_config:
        argv += ["--random-config", random_config]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += list(extra)
    return argv, dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerHandle:
    proc: subprocess.Popen
    url: str

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def start_server(
    argv: list[str], env: dict[str, str], url: str, *, timeout: float = 300.0, log=None
) -> ServerHandle:
    """Starts ``argv`` in a new session and waits until ``url/health`` answers 200.

    Raises:
      RuntimeError: when the process exits first (its exit code is in the message) or
        ``timeout`` passes.
    """
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=log, stderr=log)
    handle = ServerHandle(proc, url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with code {proc.returncode} before answering: {' '.join(argv)}"
            )
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return handle
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    handle.stop()
    raise RuntimeError(f"server at {url} not healthy after {timeout:.0f} s")
