"""Multi-host start-up: two CPU processes on localhost (``jax.distributed`` over gloo) run the
tiny loop with the policy step SPMD over a mesh spanning both, and produce the metrics of a
single-process run (discrete decisions equal, floats to rounding: the gradient is summed over
two shards instead of one)."""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(
    run_dir: Path,
    overrides: list[str],
    env_extra: dict[str, str],
    *,
    devices: int = 1,
    rounds: int = ROUNDS,
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        **env_extra,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train._multihost_run", str(run_dir), str(rounds), *overrides],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _close(a, b, path="") -> None:
    """Equal structure and discrete values; floats equal to 1e-4 relative / 1e-6 absolute."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6), f"{path}: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("timings")
    return rows


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_processes_match_one(tmp_path):
    port = _free_port()
    procs = [_launch(tmp_path / "single", [], {})]
    for pid in range(2):
        procs.append(
            _launch(
                tmp_path / "multi",
                ["parallel.fsdp=2"],
                {
                    "JAX_COORDINATOR_ADDRESS": f"localhost:{port}",
                    "JAX_NUM_PROCESSES": "2",
                    "JAX_PROCESS_ID": str(pid),
                },
            )
        )
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=840)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    assert "process 0 of 2: done, devices 2" in outs[1]
    assert "process 1 of 2: done, devices 2" in outs[2]
    single, multi = _metrics(tmp_path / "single"), _metrics(tmp_path / "multi")
    assert [r["round"] for r in multi] == list(range(1, ROUNDS + 1))
    raw = (tmp_path / "multi" / "metrics.jsonl").read_text().splitlines()
    for row in map(json.loads, raw):  # the broadcast is measured every round
        assert row["timings"]["broadcast_bytes"] > 0 and row["timings"]["broadcast_s"] >= 0
    assert sum(multi[-1]["updates"]) > 0  # the SPMD policy step did run
    _close(single, multi)
    # process 0 alone wrote the run directory, including a restorable checkpoint
    assert (tmp_path / "multi" / "checkpoints" / "LATEST").is_file()


def _multi(run_dir: Path, overrides: list[str], port: int, **kw) -> list[subprocess.Popen]:
    """Two processes of one run, 4 fake CPU devices each: a mesh of 8 over both."""
    return [
        _launch(
            run_dir,
            overrides,
            {
                "JAX_COORDINATOR_ADDRESS": f"localhost:{port}",
                "JAX_NUM_PROCESSES": "2",
                "JAX_PROCESS_ID": str(pid),
                "COEVO_HEARTBEAT_TIMEOUT_S": "15",
            },
            devices=4,
            **kw,
        )
        for pid in range(2)
    ]


def _finish(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


MESH = ["parallel.data=2", "parallel.fsdp=4", "loop.checkpoint_every=1", "loop.keep_checkpoints=4"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_processes_of_four_devices_checkpoint_and_resume_exactly(tmp_path):
    """``Trainer.run`` as 2 processes x 4 devices: every process takes part in each orbax
    save, and a run stopped after round 1 and resumed on the same layout writes the same
    metrics as the uninterrupted run."""
    outs = _finish(_multi(tmp_path / "whole", MESH, _free_port()), 600)
    assert all("done, devices 8" in o for o in outs), outs[0][-3000:] + outs[1][-3000:]
    half = tmp_path / "half"
    outs = _finish(_multi(half, MESH, _free_port(), rounds=1), 600)
    assert all("done, devices 8" in o for o in outs), outs[0][-3000:]
    ckpt = half / "checkpoints" / "round_000001" / "arrays"
    assert ckpt.is_dir() and not list((half / "checkpoints").glob(".tmp_round_*"))
    outs = _finish(_multi(half, [*MESH, "--resume"], _free_port()), 600)
    assert all("resumed after round 1" in o and "done" in o for o in outs), outs[0][-3000:]
    whole, resumed = _metrics(tmp_path / "whole"), _metrics(half)
    assert [r["round"] for r in resumed] == [1, 2] and sum(whole[-1]["updates"]) > 0
    assert json.dumps(resumed) == json.dumps(whole)  # exact, not to a tolerance


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_process_stops_its_peer_with_a_clear_error(tmp_path, victim):
    """``kill -9`` of one process mid-run: the other exits within a bounded time (its next
    collective fails at once; the heartbeat bounds the rest) with a clear error, no hang:
    our one line and exit 3, or, when the coordinator died and JAX's error polling noticed
    first, JAX's own termination message."""
    import signal
    import time

    run = tmp_path / "run"
    procs = _multi(run, MESH, _free_port(), rounds=200)
    try:
        deadline = time.monotonic() + 600
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
            assert time.monotonic() < deadline, "no round finished"
            assert all(p.poll() is None for p in procs), procs[0].communicate()[0][-3000:]
            time.sleep(1)
        procs[victim].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        out = procs[1 - victim].communicate(timeout=120)[0]
        waited = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    survivor = procs[1 - victim]
    assert waited < 60, waited
    if survivor.returncode == 3:  # its collective failed first: our one line
        assert f"error: process {1 - victim} of 2: a collective failed" in out, out[-3000:]
        assert "Traceback" not in out
    else:
        # The coordinator (process 0) died and JAX's error polling saw it before any
        # collective did: the coordination client aborts the process with its own message.
        assert victim == 0 and survivor.returncode == -signal.SIGABRT, out[-3000:]
        assert "the JAX distributed service detected fatal errors" in out, out[-3000:]


def test_multi_process_run_needs_a_mesh():
    from coevo_jax.train.config import ParallelSpec

    assert not ParallelSpec().enabled and ParallelSpec(fsdp=-1).enabled
    with pytest.raises(ValueError, match="at most one"):
        ParallelSpec(data=-1, fsdp=-1)
    with pytest.raises(ValueError, match="positive or -1"):
        ParallelSpec(tensor=0)


@pytest.mark.slow
def test_mesh_in_one_process_matches_no_mesh(tmp_path):
    """The SPMD policy step over this process's 8 (fake) devices gives the single-device run."""
    import jax

    from coevo_jax._config import from_dict, to_dict
    from coevo_jax.train.config import TrainConfig
    from tests.train._tiny import tiny_config, tiny_trainer

    base = to_dict(tiny_config(rounds=2))
    runs = {}
    for name, parallel in (("plain", {}), ("mesh", {"fsdp": -1})):
        cfg = from_dict(TrainConfig, {**base, "parallel": parallel})
        tr = tiny_trainer(cfg, tmp_path / name)
        rows = [tr.run_round() for _ in range(2)]
        if name == "mesh":
            assert tr.system.mesh is not None and tr.system.mesh.size == jax.device_count()
            emb = tr.system.groups[0].backbone.params["embed"]
            assert len(emb.sharding.device_set) == jax.device_count()  # the backbone is sharded
        tr.close()
        runs[name] = [{k: v for k, v in r.items() if k != "timings"} for r in rows]
    assert sum(runs["mesh"][-1]["updates"]) > 0
    _close(json.loads(json.dumps(runs["plain"])), json.loads(json.dumps(runs["mesh"])))
