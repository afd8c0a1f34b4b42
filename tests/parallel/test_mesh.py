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


def _run_isolated(code: str, env: dict[str, str]) -> dict:
    """Runs ``code`` in a fresh Python (jax not yet imported) and returns the JSON it prints."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _clean_env(**extra: str) -> dict[str, str]:
    import os

    from coevo_jax.parallel.mesh import INHERITED_GPUS_VAR

    drop = ("CUDA_VISIBLE_DEVICES", "XLA_PYTHON_CLIENT_MEM_FRACTION", INHERITED_GPUS_VAR)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "JAX_PLATFORMS": "cpu", **extra}


_CONFIGURE = """
import json, os
from coevo_jax.parallel.mesh import configure_devices
configure_devices((1, 3), 0.4)
import jax
n = len(jax.devices())  # the backend starts after the variables were set; CPU ignores them
try:
    configure_devices((0,))
    late = None
except RuntimeError as e:
    late = str(e)
configure_devices(())  # nothing to set: harmless at any time
print(json.dumps({k: os.environ.get(k) for k in (
    "CUDA_VISIBLE_DEVICES", "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "COEVO_INHERITED_CUDA_VISIBLE_DEVICES")} | {"n": n, "late": late}))
"""


def test_configure_devices_sets_the_variables_before_jax_starts():
    """In a fresh process: set before the backend exists, CPU keeps working, a late call that
    would change something fails loudly instead of being ignored."""
    out = _run_isolated(_CONFIGURE, _clean_env())
    assert out["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert out["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.4"
    assert out["COEVO_INHERITED_CUDA_VISIBLE_DEVICES"] == "all"
    assert out["n"] == 8  # the test's 8 fake CPU devices, unaffected
    assert "before JAX creates its backend" in out["late"]


def test_configure_devices_maps_indices_through_the_inherited_list():
    out = _run_isolated(_CONFIGURE, _clean_env(CUDA_VISIBLE_DEVICES="4,5,6,7"))
    assert out["CUDA_VISIBLE_DEVICES"] == "5,7"
    assert out["COEVO_INHERITED_CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
