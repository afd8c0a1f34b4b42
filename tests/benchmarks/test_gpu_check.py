"""The GPU check (benchmarks/gpu_check.py): its tiny shape end to end on CPU, its time limits,
and its JSON against benchmarks/results_schema.json. Figures are not asserted."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_check_parts import analytic_flops

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "benchmarks" / "results_schema.json").read_text())
TORCH_SIDE = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft", "trl"))


def run_check(out: Path, *args: str, timeout: float = 600) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_check",
            "--shape",
            "tiny",
            "--out",
            str(out),
            "--quiet",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "wrote" in proc.stdout
    return json.loads((out / "gpu_check-tiny.json").read_text())


def validate(result: dict) -> None:
    """jsonschema when installed, else the keys the schema requires."""
    try:
        import jsonschema
    except ImportError:
        assert set(SCHEMA["required"]) <= set(result)
        assert set(SCHEMA["$defs"]["gpu_check"]["required"]) <= set(result["gpu_check"])
        return
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(result, SCHEMA)


@pytest.mark.slow
def test_gpu_check_tiny_runs_every_part_with_the_levers(tmp_path):
    res = run_check(tmp_path)
    validate(res)
    parts = res["gpu_check"]["parts"]
    for name in ("policy_step", "router", "lora_stacked"):
        assert parts[name]["status"] == "ok", parts[name]
    torch_part = parts["torch_policy_step"]
    assert torch_part["status"] == ("ok" if TORCH_SIDE else "skipped"), torch_part
    pol = parts["policy_step"]
    # The paper config's levers, at tiny scale, reached the step through RLConfig.
    assert pol["rl"]["logprob_chunk"] == 8 and pol["rl"]["remat"] == "full"
    assert pol["attention_resolved"] == "blockwise"
    assert pol["compile"]["compile_s"] > 0 and pol["steps"]["runs"] >= 1
    assert pol["memory_analysis"]["temp_bytes"] > 0
    assert pol["flops"]["analytic_6nt"] > 0 and pol["flops"]["xla_cost_analysis"] > 0
    assert pol["mfu_analytic"] is None  # no dense-bf16 peak for a CPU
    names = {f["name"] for f in res["figures"]}
    assert {"policy_step_completion_tokens_per_s", "router_ms_per_query_b1"} <= names
    assert (tmp_path / "gpu_check-tiny.md").exists() and (tmp_path / "gpu_check-tiny.log").exists()


def test_gpu_check_stops_a_part_at_its_limit_and_skips_past_the_budget(tmp_path):
    res = run_check(
        tmp_path,
        "--parts",
        "policy_step",
        "router",
        "--limit",
        "policy_step=3",
        "--budget-s",
        "9",
        timeout=120,
    )
    validate(res)
    runs, parts = res["benchmarks"], res["gpu_check"]["parts"]
    assert runs["policy_step"]["status"] == "skipped" and runs["policy_step"]["timed_out"]
    assert "time limit of 3 s" in parts["policy_step"]["reason"]
    assert runs["policy_step"]["wall_s"] < 15
    assert parts["router"]["status"] == "skipped" and "budget" in parts["router"]["reason"]
    assert res["gpu_check"]["wall_s"] < 30


def test_existing_suite_results_still_validate():
    pytest.importorskip("jsonschema")
    suites = [
        p
        for p in (ROOT / "benchmarks" / "results").glob("*.json")
        if "schema_version" in json.loads(p.read_text())
    ]
    assert suites
    for p in suites:
        validate(json.loads(p.read_text()))


def test_analytic_flops_is_six_n_tokens_plus_attention():
    class Cfg:  # one layer, square projections, so N is easy to count by hand
        hidden_size, head_dim, num_layers, num_heads, num_kv_heads = 8, 2, 1, 4, 4
        intermediate_size, vocab_size = 8, 10

    n_layer = 4 * 8 * 8 + 3 * 8 * 8  # q, k, v, o + gate, up, down
    rows, prompt, completion = 2, 3, 5
    tokens = rows * (prompt + completion)
    expect = 6 * n_layer * tokens + 12 * 1 * 4 * 2 * 8 * tokens + 6 * 8 * 10 * rows * completion
    assert analytic_flops(Cfg, rows, prompt, completion) == expect


def test_a_policy_step_that_fails_under_cudnn_runs_again_blockwise(monkeypatch, tmp_path):
    from benchmarks import gpu_check

    calls = []

    def fake_run_part(name, args, overrides, limit_s, work, log):
        calls.append(list(overrides))
        run = {"returncode": 0, "timed_out": False, "wall_s": 1.0, "peak_rss_mib": 1.0}
        if len(calls) == 1:  # cuDNN attention chosen by `auto`, and the step broke
            rec = {"stage": "compile", "attention_resolved": "cudnn"}
            return {"run": dict(run, returncode=1), "record": rec, "log_tail": "XlaRuntimeError: cudnn",
                    "limit_s": limit_s}  # fmt: skip
        rec = {"stage": "done", "attention_resolved": "blockwise"}
        return {"run": run, "record": rec, "log_tail": "", "limit_s": limit_s}

    monkeypatch.setattr(gpu_check, "run_part", fake_run_part)
    args = gpu_check.parse(["--shape", "tiny", "--parts", "policy_step", "router", "--quiet"])
    seen = []
    gpu_check.run_parts(args, tmp_path, tmp_path / "log", lambda ran: seen.append(ran))
    assert calls[0] == [] and calls[1] == ["rl.attention=blockwise"]
    assert calls[2] == ["rl.attention=blockwise"]  # the later parts keep the same levers
    out, status, _ = seen[-1]["parts"]["policy_step"]
    assert status == "ok" and "cudnn" in out["record"]["cudnn_attempt_failed"]
