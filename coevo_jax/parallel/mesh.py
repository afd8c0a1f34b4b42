"""Device meshes with the project's three named axes, multi-host start-up, and which GPUs
this process may use.

Axes: ``data`` (pure data parallelism: params replicated), ``fsdp`` (batch split *and* params
sharded, gathered per layer by XLA), ``tensor`` (Megatron-style split of heads and MLP width).
The mesh uses ``AxisType.Auto`` so jit keeps GSPMD's propagation semantics: shardings placed on
inputs flow through the program and the results equal the single-device ones.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, MutableMapping, Sequence

import jax
from jax.sharding import AxisType, Mesh

AXES = ("data", "fsdp", "tensor")

log = logging.getLogger(__name__)


def make_mesh(
    data: int = 1,
    fsdp: int = -1,
    tensor: int = 1,
    *,
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """A ``Mesh`` of shape ``(data, fsdp, tensor)`` over ``devices`` (default: all devices).

    One size may be -1: it takes all devices the others leave. The product must equal the
    device count.

    Raises:
      ValueError: sizes that do not multiply to the device count, or more than one -1.
    """
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(
            f"at most one mesh axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}"
        )
    if any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"mesh axis sizes must be positive or -1, got {sizes}")
    if -1 in sizes:
        rest = math.prod(s for s in sizes if s != -1)
        if n % rest:
            raise ValueError(
                f"{n} devices cannot be split into axes {dict(zip(AXES, sizes, strict=True))}"
            )
        sizes[sizes.index(-1)] = n // rest
    if math.prod(sizes) != n:
        raise ValueError(
            f"mesh {dict(zip(AXES, sizes, strict=True))} needs {math.prod(sizes)} devices, have {n}"
        )
    return jax.make_mesh(tuple(sizes), AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


# Variables that mark a multi-process launch, checked in this order.
_COORD_VARS = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")
_NPROC_VARS = ("JAX_NUM_PROCESSES", "NUM_PROCESSES", "WORLD_SIZE")
_PID_VARS = ("JAX_PROCESS_ID", "PROCESS_ID", "RANK")
_CLUSTER_VARS = (
    "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_SIZE",
    "TPU_WORKER_HOSTNAMES",
    "MEGASCALE_COORDINATOR_ADDRESS",
)


def _env(names: Sequence[str]) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


def _heartbeat() -> dict[str, int]:
    value = os.environ.get("COEVO_HEARTBEAT_TIMEOUT_S")
    return {"heartbeat_timeout_seconds": int(value)} if value else {}


def initialize_distributed() -> bool:
    """Starts ``jax.distributed`` for a multi-host run, from the launcher's environment.

    Reads the coordinator ``host:port`` from ``JAX_COORDINATOR_ADDRESS`` (or
    ``COORDINATOR_ADDRESS``; ``MASTER_ADDR``+``MASTER_PORT`` as torchrun sets them), the process
    count from ``JAX_NUM_PROCESSES``/``NUM_PROCESSES``/``WORLD_SIZE`` and this process's id from
    ``JAX_PROCESS_ID``/``PROCESS_ID``/``RANK``. Without those but inside SLURM, Open MPI or a TPU
    pod it lets JAX auto-detect the cluster. Otherwise (a single process) it does nothing.
    Calling it twice is harmless.

    ``COEVO_HEARTBEAT_TIMEOUT_S`` (default JAX's, 100 s) bounds how long a process that is
    not inside a collective keeps running after a peer died: the coordination service then
    stops it. A process inside a collective learns of a dead peer at once (its collective
    fails; ``train.distributed.peer_guard``).

    Returns:
      True when the process is part of an initialised multi-process run.
    """
    if jax.distributed.is_initialized():
        return True
    coord = _env(_COORD_VARS)
    if coord is None and os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        coord = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    nproc = _env(_NPROC_VARS)
    pid = _env(_PID_VARS)
    if coord is not None:
        if nproc is None or pid is None:
            raise ValueError(
                f"coordinator address {coord!r} is set but the process count or id is not; set "
                f"one of {_NPROC_VARS} and one of {_PID_VARS}"
            )
        if int(nproc) <= 1:
            return False
        jax.distributed.initialize(
            coordinator_address=coord,
            num_processes=int(nproc),
            process_id=int(pid),
            **_heartbeat(),
        )
    elif _env(_CLUSTER_VARS) is not None:
        jax.distributed.initialize(**_heartbeat())
    else:
        return False
    log.info("jax.distributed: process %d of %d", jax.process_index(), jax.process_count())
    return True


def _backend_started() -> bool:
    """Whether JAX has created a backend (a private function of JAX's; False where it moved:
    then a late call goes unnoticed rather than failing)."""
    from jax._src import xla_bridge

    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started and started())


#: where :func:`configure_devices` keeps the ``CUDA_VISIBLE_DEVICES`` the command started with
#: (``"all"`` when it was unset), so that GPU indices keep one meaning after it narrows the
#: variable for this process: the launcher maps ``rollout.devices`` through it too
INHERITED_GPUS_VAR = "COEVO_INHERITED_CUDA_VISIBLE_DEVICES"


def cuda_visible_devices(indices: Sequence[int], environ: Mapping[str, str] = os.environ) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows GPUs ``indices`` of this command.

    Index ``i`` is the ``i``-th GPU the command was started with: the ``i``-th entry of the
    inherited ``CUDA_VISIBLE_DEVICES`` (a SLURM job on GPUs 4-7 sees them as 0-3), or GPU
    ``i`` when the variable was unset. Entries are kept as written (ids, UUIDs or MIG names).

    Raises:
      ValueError: an index the inherited list does not have.
    """
    inherited = environ.get(INHERITED_GPUS_VAR, environ.get("CUDA_VISIBLE_DEVICES", "all"))
    if inherited == "all":
        return ",".join(str(i) for i in indices)
    visible = [d.strip() for d in inherited.split(",") if d.strip()]
    missing = [i for i in indices if not 0 <= i < len(visible)]
    if missing:
        raise ValueError(
            f"GPU indices {missing} are not among the {len(visible)} GPUs this command was "
            f"started with (CUDA_VISIBLE_DEVICES={inherited!r})"
        )
    return ",".join(visible[i] for i in indices)


def configure_devices(
    devices: Sequence[int] = (),
    mem_fraction: float | None = None,
    environ: MutableMapping[str, str] = os.environ,
) -> None:
    """Restricts this process to GPUs ``devices`` and JAX's preallocation to ``mem_fraction``.

    Sets ``CUDA_VISIBLE_DEVICES`` (via :func:`cuda_visible_devices`; empty ``devices`` leaves
    every GPU visible) and ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (None keeps JAX's default, 75 %
    of each GPU). Both are read when JAX creates its backend, not at ``import jax``, so this
    must run before anything asks for a device. A CPU backend ignores both.

    Raises:
      RuntimeError: called with something to set after JAX's backend was created.
      ValueError: an index the inherited ``CUDA_VISIBLE_DEVICES`` does not have.
    """
    if not devices and mem_fraction is None:
        return
    if _backend_started():
        raise RuntimeError(
            "configure_devices must run before JAX creates its backend (before the first "
            "jax.devices() or array); parallel.devices / parallel.memory_fraction came too late"
        )
    if devices:
        value = cuda_visible_devices(devices, environ)
        environ.setdefault(INHERITED_GPUS_VAR, environ.get("CUDA_VISIBLE_DEVICES", "all"))
        environ["CUDA_VISIBLE_DEVICES"] = value
    if mem_fraction is not None:
        environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{mem_fraction:g}"
    log.info(
        "trainer devices: CUDA_VISIBLE_DEVICES=%s XLA_PYTHON_CLIENT_MEM_FRACTION=%s",
        environ.get("CUDA_VISIBLE_DEVICES"),
        environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
    )
