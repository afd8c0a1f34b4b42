"""Multi-device and multi-host training: the policy step on a mesh, one driver process.

Design (what the loop does when ``parallel`` asks for a mesh):

* ``coevo train`` calls :func:`coevo_jax.parallel.initialize_distributed` first, so a run
  launched with ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` (or
  torchrun/SLURM/MPI variables) starts ``jax.distributed``; the mesh then spans every process's
  devices.
* Only the **policy step** runs SPMD on the mesh: each group keeps a second copy of its frozen
  backbone placed with the partition rules of ``coevo_jax.parallel.rules`` (``fsdp``/``tensor``
  split it), the policy state (adapters, AdamW moments, counters, key) is replicated, and the
  policy batch is split over ``data`` x ``fsdp``; XLA all-reduces the gradients. The original
  process-local backbone keeps serving the router features and the in-process engine, which
  are small, latency-bound passes not worth a collective each.
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

import pickle
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


def shard_group(group: Any, mesh: Mesh, rl_cfg: Any) -> None:
    """Puts ``group``'s training side on ``mesh``: sharded backbone copy, replicated policy
    state and a policy step with those shardings (in place)."""
    group.mesh = mesh
    group.train_params = shard_params(jax.device_get(group.backbone.params), mesh)
    group.policy = replicate(group.policy, mesh)
    state_sh = jax.tree.map(lambda _: replicated(mesh), group.policy)
    group.step_fn = make_policy_step(
        group.backbone.cfg, rl_cfg, donate=True, out_shardings=(state_sh, replicated(mesh))
    )


def place_batch(batch: Any, mesh: Mesh) -> Any:
    """A host-identical batch split over the mesh's batch axes (rows over ``data`` x ``fsdp``)."""
    return jax.tree.map(lambda x: place(np.asarray(x), batch_sharding(np.shape(x), mesh)), batch)


def broadcast_object(obj: Any) -> Any:
    """Process 0's ``obj`` on every process (any picklable value; others pass anything).

    Two collectives: the payload length, then the payload as a uint8 array.
    """
    if jax.process_count() == 1:
        return obj
    from jax.experimental import multihost_utils

    data = np.frombuffer(pickle.dumps(obj), np.uint8) if is_driver() else np.zeros(0, np.uint8)
    n = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
    buf = np.zeros(n, np.uint8)
    if is_driver():
        buf[:] = data
    buf = np.asarray(multihost_utils.broadcast_one_to_all(buf))
    return pickle.loads(buf.tobytes())
