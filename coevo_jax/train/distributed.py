"""Multi-device and multi-host training: the policy step on a mesh, one driver process.

Design (what the loop does when ``parallel`` asks for a mesh):

* ``coevo train`` calls :func:`coevo_jax.parallel.initialize_distributed` first, so a run
  launched with ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` (or
  torchrun/SLURM/MPI variables) starts ``jax.distributed``; the mesh then spans every process's
  devices.
* The frozen backbones are placed once with the partition rules of ``coevo_jax.parallel.rules``
  (``fsdp``/``tensor`` split them; no whole replica stays on any device). The policy state
  (adapters, AdamW moments, counters, key) and the router state are replicated.
* Every jitted program of a round runs under the mesh (:class:`MeshStep`, or
  ``jax.set_mesh`` around the call), with its batch split over ``data`` x ``fsdp``: the
  policy step with its reference pass, the trainer's recompute of behaviour log-probs, the
  router features (a partial forward of the sharded backbone) and the router step. The
  mesh must be the ambient one while jit traces: the decoder pins its activations' batch
  axis to the mesh only then (``models.decoder.batch_constraint``); traced without it, the
  compiled step keeps every row on every device and gives the same numbers, so equality
  tests cannot tell. ``tests/train/test_mesh_split.py`` checks the split on the compiled
  programs (per-device FLOPs).
* **Process 0 drives** the round's host-side decisions: it routes, calls the rollout engines
  (the bridge) and the reward function, then broadcasts ``(active, trajectories, failures,
  rewards)`` to the other processes (:func:`broadcast_object`, a pickled byte array through
  ``multihost_utils.broadcast_one_to_all``). Every process then pushes the same groups onto its
  buffers and builds the same policy batch, so the SPMD step sees consistent inputs. The router
  is cheap and deterministic, so every process updates its own copy from the same broadcast
  inputs rather than receiving it. Other processes build no engine.
* Only process 0 writes the run directory (config, metrics, TensorBoard, checkpoints, plots).
  Checkpoints hold host copies of the replicated state, so a resumed run re-places them.

With the default ``parallel`` (all sizes 1) none of this is active and the loop is the
single-device one.

Launch, e.g. two hosts (run the same command on each, with its own process id)::

    JAX_COORDINATOR_ADDRESS=host0:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=<0|1> \
        coevo train --config configs/paper_homogeneous.yaml parallel.fsdp=-1

The run directory must be on a filesystem every process can read (resume reads it
everywhere). Limits: a failure on process 0 during generation leaves the others waiting in
the next broadcast until the launcher kills them; every process loads the records, so point
``data.path`` at a ``coevo data build`` output rather than letting each process build the
mixture into the shared run directory at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from coevo_jax.parallel import batch_sharding, make_mesh, place, shard_params
from coevo_jax.rl.train_step import make_policy_step
from coevo_jax.train.config import ParallelSpec


def is_driver() -> bool:
    """True on the process that routes, generates, scores and writes (process 0)."""
    return jax.process_index() == 0


def build_mesh(spec: ParallelSpec) -> Mesh | None:
    """The training mesh, or None when ``spec`` asks for none (every size 1, one process).

    Raises:
      ValueError: a multi-process run without a mesh, or sizes that do not fit the devices.
    """
    if not spec.enabled:
        if jax.process_count() > 1:
            raise ValueError(
                f"this is a {jax.process_count()}-process run but parallel.data/fsdp/tensor are "
                "all 1; set e.g. parallel.fsdp=-1 so the mesh spans every process's devices"
            )
        return None
    return make_mesh(data=spec.data, fsdp=spec.fsdp, tensor=spec.tensor)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Every leaf of ``tree`` placed whole on every device of ``mesh`` (via host memory)."""
    sh = replicated(mesh)
    return jax.tree.map(lambda x: place(np.asarray(jax.device_get(x)), sh), tree)


def under_mesh(mesh: Mesh | None):
    """``jax.set_mesh(mesh)`` as a context, or nothing when ``mesh`` is None."""
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


@dataclasses.dataclass(frozen=True)
class MeshStep:
    """A jitted function that is traced, lowered and called with ``mesh`` as the ambient mesh.

    ``__call__`` runs it; ``lower`` lowers it for ahead-of-time compilation (``coevo plan``,
    the scale tests), so what is planned is exactly what the trainer calls.
    """

    fn: Callable
    mesh: Mesh

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.fn(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.fn.lower(*args, **kwargs)


def shard_router(state: Any, mesh: Mesh) -> Any:
    """The router state on ``mesh``: matrices (and their Adam moments) split over ``fsdp``
    on their longest axis that it divides, the rest replicated (via host memory).

    Its rows are few (a round's queries), so with replicated heads the Adam update, which
    no batch split shares, would cost every device as much as its share of the rows.
    """

    def put(x):
        host = np.asarray(jax.device_get(x))
        return place(host, NamedSharding(mesh, router_spec(host.shape, mesh)))

    return jax.tree.map(put, state)


def router_spec(shape: tuple[int, ...], mesh: Mesh) -> P:
    """The spec :func:`shard_router` gives a router leaf of ``shape``: its longest axis that
    ``fsdp`` divides split over ``fsdp`` (matrices only), else replicated (``coevo plan``
    places abstract router states with it too)."""
    n = mesh.shape["fsdp"]
    axes = [i for i, d in enumerate(shape) if d % n == 0] if len(shape) >= 2 else []
    spec: list[Any] = [None] * len(shape)
    if axes and n > 1:
        spec[max(axes, key=lambda i: shape[i])] = "fsdp"
    return P(*spec)


def shard_backbone(backbone: Any, mesh: Mesh) -> None:
    """Places ``backbone.params`` on ``mesh`` by the partition rules, in place (via host
    memory, which works in multi-process runs; a backbone already on ``mesh`` stays)."""
    leaves = jax.tree.leaves(backbone.params)
    if leaves and all(getattr(x, "sharding", None) is not None for x in leaves):
        if all(getattr(x.sharding, "mesh", None) == mesh for x in leaves):
            return
    backbone.params = shard_params(jax.device_get(backbone.params), mesh)


def shard_group(group: Any, mesh: Mesh, rl_cfg: Any) -> None:
    """Puts ``group`` on ``mesh``: its backbone sharded (the one copy every pass reads), its
    policy state replicated, and its policy step traced under the mesh with those shardings
    (in place)."""
    group.mesh = mesh
    shard_backbone(group.backbone, mesh)
    group.policy = replicate(group.policy, mesh)
    group.step_fn = mesh_policy_step(group.backbone.cfg, rl_cfg, group.policy, mesh)


def mesh_policy_step(model_cfg: Any, rl_cfg: Any, policy: Any, mesh: Mesh) -> MeshStep:
    """The policy step a mesh run calls: state replicated in and out, traced under ``mesh``
    (``policy`` gives the state's structure; arrays or ``ShapeDtypeStruct`` both do)."""
    state_sh = jax.tree.map(lambda _: replicated(mesh), policy)
    step = make_policy_step(
        model_cfg, rl_cfg, donate=True, out_shardings=(state_sh, replicated(mesh))
    )
    return MeshStep(step, mesh)


def place_batch(batch: Any, mesh: Mesh) -> Any:
    """A host-identical batch split over the mesh's batch axes (rows over ``data`` x ``fsdp``)."""
    return jax.tree.map(lambda x: place(np.asarray(x), batch_sharding(np.shape(x), mesh)), batch)


def to_host(x: Any) -> np.ndarray:
    """``x`` as numpy on this process; an array sharded over several processes is gathered
    (a collective: every process must call it)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def broadcast_object(obj: Any) -> tuple[Any, int]:
    """``(process 0's obj, payload bytes)`` on every process (any picklable value; the
    others pass anything).

    Two collectives: the payload length, then the payload as one uint8 array. Why pickle and
    not arrays: a round's payload is ragged host data (per-trajectory token and log-prob
    lists of varying length, query ids, failure names), so an array encoding would be a
    hand-written serializer sending the same bytes in the same one collective; every process
    runs the same code, so pickle's format is shared. The loop logs the bytes and seconds of
    each round's broadcast (``broadcast`` in ``metrics.jsonl``).
    """
    if jax.process_count() == 1:
        return obj, 0
    from jax.experimental import multihost_utils

    data = np.frombuffer(pickle.dumps(obj), np.uint8) if is_driver() else np.zeros(0, np.uint8)
    n = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
    buf = np.zeros(n, np.uint8)
    if is_driver():
        buf[:] = data
    buf = np.asarray(multihost_utils.broadcast_one_to_all(buf))
    return pickle.loads(buf.tobytes()), n


class PeerLost(RuntimeError):
    """A collective of a multi-process run failed: another process of the run stopped."""


@contextlib.contextmanager
def peer_guard():
    """Turns the runtime error a collective raises when a peer process has died (gloo:
    "Connection closed by peer"; NCCL and the coordination service likewise) into
    :class:`PeerLost`, naming this process. Single-process errors pass unchanged."""
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if jax.process_count() == 1:
            raise
        first = str(e).strip().splitlines()[0][:300]
        raise PeerLost(
            f"process {jax.process_index()} of {jax.process_count()}: a collective failed, so "
            f"another process of this multi-host run has stopped (see its log): {first}"
        ) from e


def exit_for_peer_loss(err: PeerLost, code: int = 3) -> None:
    """Prints ``err`` as one line and ends the process at once.

    A normal interpreter exit would wait at ``jax.distributed``'s shutdown barrier for the
    dead peer (up to the heartbeat timeout) and then abort with a native stack trace.
    """
    import os
    import sys

    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)
