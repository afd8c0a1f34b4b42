"""A run killed with SIGKILL and resumed gives the same metrics, round for round."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.train._kill_run import build

ROOT = Path(__file__).resolve().parents[2]


def _metrics(run_dir):
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "timings"} for r in rows]


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    rounds = 5
    ref = build(str(tmp_path / "ref"), rounds)
    ref.run()
    ref.close()

    killed = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.train._kill_run", str(killed), str(rounds)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 900
    while not (killed / "checkpoints" / "round_000002").exists():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    resumed = build(str(killed), rounds)
    assert resumed.restore()
    assert 2 <= resumed.round < rounds
    resumed.run()
    resumed.close()
    assert _metrics(killed) == _metrics(tmp_path / "ref")
