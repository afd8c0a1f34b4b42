"""The one-call GPU check runs end to end on a tiny model on CPU (figures are not asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_tiny_smoke(tmp_path):
    pytest.importorskip("torch", reason="the PyTorch side of the check needs torch (test extra)")
    pytest.importorskip(
        "trl", reason="the PyTorch side of the check needs trl==1.16.0 (test extra)"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--shape", "tiny", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "gpu_check-tiny.json").read_text())
    assert {
        "policy_step",
        "router_ms",
        "decode_tokens_per_s",
        "matmul_peak_tflops",
        "lora_mixed",
    } <= set(res["jax"])
    assert "tokens_per_s" in res["torch"] and res["policy_step_ratio_jax_over_torch"] > 0
    assert "ratio JAX / PyTorch" in proc.stdout
