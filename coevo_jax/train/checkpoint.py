"""Atomic checkpoints of everything a run needs to resume bit for bit.

A checkpoint is a directory ``checkpoints/round_{r:06d}/`` holding
- ``arrays/``: an orbax checkpoint of the flattened array state (adapters, both optimizers,
  router heads and counters, RNG keys), saved as a flat ``{index: array}`` dict so that custom
  pytree nodes (NNX state, flax structs) need no orbax handlers; the caller restores into the
  structure of a freshly initialised state;
- ``state.json``: host-side state (buffers, data cursor, versions, round).

Writes go to a temporary sibling and are published with one ``os.replace`` of the directory,
then ``LATEST`` is replaced atomically: a kill at any point leaves the previous checkpoint
intact and findable. ``LATEST`` names the newest checkpoint for people and tools; resume
takes the newest complete directory, which a kill between the two replaces leaves one
ahead of ``LATEST``.

In a multi-process run every process calls :func:`save_checkpoint`, as multi-host orbax
expects: each writes the shards of the global arrays it holds into the same temporary
directory (its name is a function of the round, so every process agrees on it), and
process 0 alone writes ``state.json``, publishes and prunes, between barriers. Restoring
reads every array whole into host memory on every process (:func:`load_checkpoint`); the
caller places them on its mesh, so a run resumes on any layout of the same state.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

LATEST = "LATEST"


def _checkpointer(every_process: bool = True) -> ocp.Checkpointer:
    """Orbax's checkpointer: saves are collective over every process (the default); a read
    that each process makes on its own (``every_process=False``) tells orbax this process is
    alone, or it would wait at a barrier for peers that never call it."""
    if every_process or jax.process_count() == 1:
        return ocp.PyTreeCheckpointer()
    me = jax.process_index()
    opts = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
    return ocp.Checkpointer(
        ocp.PyTreeCheckpointHandler(multiprocessing_options=opts), multiprocessing_options=opts
    )


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _restore_host(path: Path) -> dict[str, np.ndarray]:
    """Every array of ``path`` (an orbax flat dict) whole, as numpy, read by this process
    alone."""
    ckptr = _checkpointer(every_process=False)
    keys = ckptr.metadata(path).item_metadata.tree
    args = {k: ocp.RestoreArgs(restore_type=np.ndarray) for k in keys}
    return ckptr.restore(path, restore_args=args)


def _round_dir(root: Path, round_idx: int) -> Path:
    return root / f"round_{round_idx:06d}"


def save_checkpoint(
    root: str | os.PathLike, round_idx: int, arrays: Any, host_state: dict, *, keep: int = 2
) -> Path:
    """Writes checkpoint ``round_idx`` atomically and prunes all but the newest ``keep``.

    Args:
      root: the run's ``checkpoints`` directory (on a filesystem every process sees).
      round_idx: the number of completed rounds this state follows.
      arrays: a pytree of arrays: device arrays (global ones in a multi-process run, every
        process passing the same structure) or host arrays.
      host_state: JSON-serialisable host state (process 0's is written).

    Returns:
      The published checkpoint directory.
    """
    root = Path(root).resolve()  # orbax refuses relative paths
    primary = jax.process_index() == 0
    flat = {f"{i:05d}": x for i, x in enumerate(jax.tree.leaves(arrays))}
    if jax.process_count() == 1:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp_round_", dir=_mkdir(root)))
    else:  # every process must name the same directory
        tmp = root / f".tmp_round_{round_idx:06d}"
        if primary:
            shutil.rmtree(tmp, ignore_errors=True)
            _mkdir(tmp)
        _barrier(f"coevo_ckpt_start_{round_idx}")
    final = _round_dir(root, round_idx)
    try:
        _checkpointer().save(tmp / "arrays", flat)
        if primary:
            (tmp / "state.json").write_text(json.dumps(host_state))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
    except BaseException:
        if primary:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if primary:
        latest_tmp = root / f".{LATEST}.tmp"
        latest_tmp.write_text(final.name)
        os.replace(latest_tmp, root / LATEST)
        for old in sorted(p for p in root.glob("round_*") if p.is_dir())[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier(f"coevo_ckpt_done_{round_idx}")  # nobody reads or saves again before it is out
    return final


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory (``round_*`` with its ``state.json``), or None."""
    done = sorted(p for p in Path(root).glob("round_*") if (p / "state.json").is_file())
    return done[-1] if done else None


def checkpoint_shapes(path: str | os.PathLike) -> list[tuple[int, ...]]:
    """The shapes of a checkpoint's arrays, in the leaf order of the state it was saved from
    (for a caller that must build a template for a layout it does not know)."""
    meta = _checkpointer(every_process=False).metadata(Path(path).resolve() / "arrays")
    tree = meta.item_metadata.tree  # shapes from orbax's metadata: no array is read
    return [tuple(tree[k].shape) for k in sorted(tree)]


def load_checkpoint(path: str | os.PathLike, template: Any) -> tuple[Any, dict]:
    """Restores ``(arrays, host_state)``; ``arrays`` takes the structure of ``template``.

    Raises:
      ValueError: when the checkpoint's leaves do not match the template (a different config).
    """
    path = Path(path).resolve()
    leaves, treedef = jax.tree.flatten(template)
    flat = _restore_host(path / "arrays")
    if len(flat) != len(leaves):
        raise ValueError(
            f"{path}: holds {len(flat)} arrays, the run's state has {len(leaves)}; was the config changed?"
        )
    restored = []
    for i, ref in enumerate(leaves):
        arr = np.asarray(flat[f"{i:05d}"])
        if arr.shape != np.shape(ref) or arr.dtype != np.asarray(ref).dtype:
            raise ValueError(
                f"{path}: array {i} is {arr.shape}/{arr.dtype}, expected {np.shape(ref)}/{np.asarray(ref).dtype}"
            )
        restored.append(jax.numpy.asarray(arr))
    host = json.loads((path / "state.json").read_text())
    return jax.tree.unflatten(treedef, restored), host
