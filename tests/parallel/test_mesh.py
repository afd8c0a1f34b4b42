"""coevo_jax.parallel.mesh: mesh shapes, validation, distributed start-up from the environment."""

from __future__ import annotations

import jax
import pytest

from coevo_jax.parallel import AXES, initialize_distributed, make_mesh


def test_make_mesh_axes_and_fill():
    assert len(jax.devices()) == 8  # tests/conftest.py fakes 8 CPU devices
    mesh = make_mesh()
    assert mesh.axis_names == AXES and dict(mesh.shape) == {"data": 1, "fsdp": 8, "tensor": 1}
    mesh = make_mesh(data=2, fsdp=-1, tensor=2)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert sorted(d.id for d in mesh.devices.flat) == list(range(8))
    mesh = make_mesh(data=1, fsdp=2, tensor=1, devices=jax.devices()[:2])
    assert mesh.size == 2


@pytest.mark.parametrize(
    "sizes, msg",
    [
        ((3, -1, 1), "cannot be split"),
        ((2, 2, 1), "needs 4 devices, have 8"),
        ((-1, -1, 1), "at most one"),
    ],
)
def test_make_mesh_rejects_bad_sizes(sizes, msg):
    with pytest.raises(ValueError, match=msg):
        make_mesh(*sizes)


def test_initialize_distributed_is_a_no_op_for_a_single_process(monkeypatch):
    for var in (
        "JAX_COORDINATOR_ADDRESS",
        "COORDINATOR_ADDRESS",
        "MASTER_ADDR",
        "SLURM_JOB_ID",
        "OMPI_COMM_WORLD_SIZE",
        "TPU_WORKER_HOSTNAMES",
        "MEGASCALE_COORDINATOR_ADDRESS",
    ):
        monkeypatch.delenv(var, raising=False)
    assert initialize_distributed() is False
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "localhost:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "1")
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    assert initialize_distributed() is False  # one process: nothing to coordinate
    monkeypatch.delenv("JAX_PROCESS_ID")
    for var in ("PROCESS_ID", "RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="process count or id"):
        initialize_distributed()
