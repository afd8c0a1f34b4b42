"""The benchmark suite runner: figure extraction, ratio conventions, child runs, the schema.

Figures are never asserted: only the shape of the report and the arithmetic that turns each
benchmark's raw record into ``{name, unit, jax, pytorch, ratio, spread}``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import run_all

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "benchmarks" / "results_schema.json").read_text())

try:
    import jsonschema
except ImportError:  # validated by hand below
    jsonschema = None


def check_schema(result):
    """jsonschema when installed; the essential structure by hand either way."""
    if jsonschema is not None:
        jsonschema.Draft202012Validator.check_schema(SCHEMA)
        jsonschema.validate(result, SCHEMA)
    for key in SCHEMA["required"]:
        assert key in result, key
    for f in result["figures"]:
        assert set(SCHEMA["$defs"]["figure"]["required"]) <= set(f), f
        for side in ("jax", "pytorch", "ratio"):
            assert f[side] is None or isinstance(f[side], int | float), f
        if f["spread"] is not None:
            for side in ("jax", "pytorch"):
                r = f["spread"][side]
                assert r is None or (len(r) == 2 and r[0] <= r[1]), f
    for b in result["benchmarks"].values():
        assert b["status"] in ("ok", "failed")


def _summary(times):
    return {"median_s": sorted(times)[len(times) // 2], "min_s": min(times), "max_s": max(times)}


RECORDS = {
    "policy_step": {
        "config": {"completion_tokens_per_step": 100},
        "figures": {
            "jax-fp32": {**_summary([1.0, 2.0, 4.0]), "completion_tokens_per_s": 50.0},
            "jax-bf16": {**_summary([2.0, 2.0, 2.0]), "completion_tokens_per_s": 40.0},
            "jax-mixed": {**_summary([1.0, 1.0, 1.0]), "completion_tokens_per_s": 100.0},
            "torch-trl-peft": {**_summary([4.0, 5.0, 8.0]), "completion_tokens_per_s": 20.0},
            "torch-trl-peft-bf16": {**_summary([2.0, 4.0, 5.0]), "completion_tokens_per_s": 25.0},
        },
    },
    "sampler": {
        "config": {"prompt_tokens": 100, "prompts": 4, "new_tokens": 11},
        "figures": {
            "jax_fp32": {
                "prefill": _summary([0.5, 1.0, 2.0]),
                "full": _summary([2.0, 3.0, 5.0]),
                "prefill_tok_s": 100.0,
                "decode_tok_s": 20.0,
            },
            "torch_fp32": {
                "prefill": _summary([1.0, 2.0, 2.0]),
                "full": _summary([6.0, 6.0, 6.0]),
                "prefill_tok_s": 50.0,
                "decode_tok_s": 10.0,
            },
        },
    },
    "router": {
        "config": {"batches": [1, 8], "gen_tokens": 256},
        "jax": {
            "b1": {"router": _summary([0.01, 0.01, 0.02])},
            "b8": {"router": _summary([0.04, 0.04, 0.04])},
            "generate_b1": _summary([1.0, 1.0, 1.0]),
        },
        "torch": {
            "b1": {"router": _summary([0.02, 0.02, 0.02])},
            "b8": {"router": _summary([0.16, 0.16, 0.16])},
            "generate_b1": _summary([4.0, 4.0, 4.0]),
        },
        "summary": {"b1": {"router_over_generation": 0.01}, "b8": {}},
    },
    "publish": {
        "config": {"model": "tiny", "rank": 4},
        "figures": {"publish": _summary([0.1, 0.2, 0.3])},
    },
    "rewards": {
        "config": {},
        "rows": [
            {
                "set": "math_easy",
                "items": 10,
                "workers": 1,
                "items_per_s": 30.0,
                "math_verify_items_per_s": 10.0,
            },
            {
                "set": "math_easy",
                "items": 10,
                "workers": 2,
                "items_per_s": 40.0,
                "math_verify_items_per_s": 10.0,
            },
            {
                "set": "code_mbpp",
                "items": 5,
                "workers": 1,
                "items_per_s": 2.0,
                "math_verify_items_per_s": "-",
            },
        ],
    },  # fmt: skip
    "scaling": {
        "config": {"model": "tiny", "batches": [1, 8], "lengths": [128, 256], "backend": "cpu"},
        "figures": {
            "policy_step": {
                "b1_L128": {"step_s": 0.1},
                "b1_L256": {"step_s": 0.2},
                "b8_L128": {"step_s": 0.4},
                "b8_L256": "skipped",
            },
            "router": {
                "b1_L128": {"batch_s": 0.01},
                "b1_L256": {"batch_s": 0.02},
                "b8_L128": {"batch_s": 0.04},
                "b8_L256": "failed: MemoryError",
            },
        },
    },
}


def _run(rc=0, rss=100.0):
    return {
        "returncode": rc,
        "wall_s": 1.0,
        "peak_rss_mib": rss,
        "log": "x.log",
        "timed_out": False,
    }


def _assemble(records, runs):
    return run_all.assemble(
        records,
        runs,
        command="python -m benchmarks.run_all --quick",
        quick=True,
        machine_label="cpu2",
        date="2026-12-02",
    )


def test_figures_ratios_and_spreads_from_records():
    records = {k: {**v, "_path": f"/nonexistent/{k}.json"} for k, v in RECORDS.items()}
    result = _assemble(records, {k: _run() for k in records})
    check_schema(result)
    f = {x["name"]: x for x in result["figures"]}

    # throughput, like for like: the fastest JAX variant (jax-mixed) is not set against TRL
    # fp32 but against TRL under autocast; fp32 against fp32.
    ps = f["policy_step_tokens_per_s"]
    assert (ps["jax"], ps["pytorch"], ps["jax_variant"]) == (50.0, 20.0, "jax-fp32")
    assert ps["ratio"] == pytest.approx(2.5)
    assert ps["spread"]["jax"] == pytest.approx([25.0, 100.0])  # 100 tokens / [4 s, 1 s]
    assert ps["spread"]["pytorch"] == pytest.approx([12.5, 25.0])
    bf = f["policy_step_tokens_per_s_bf16"]
    assert (bf["jax"], bf["pytorch"], bf["jax_variant"]) == (100.0, 25.0, "jax-mixed")
    assert bf["ratio"] == pytest.approx(4.0) and "autocast" in bf["baseline"]

    # A remat variant is set against TRL with gradient checkpointing (the same recompute),
    # not against the faster TRL step without it.
    rec = {**records["policy_step"], "figures": dict(records["policy_step"]["figures"])}
    rec["figures"]["jax-mixed-remat"] = {
        **_summary([1.0, 1.0, 1.0]),
        "completion_tokens_per_s": 90.0,
    }
    rec["figures"]["torch-trl-peft-bf16-gc"] = {
        **_summary([3.0, 3.0, 3.0]),
        "completion_tokens_per_s": 30.0,
    }
    got = {x["name"]: x for x in run_all.extract("policy_step", rec)}
    assert got["policy_step_tokens_per_s_bf16"]["jax_variant"] == "jax-mixed"
    gc = got["policy_step_tokens_per_s_bf16_gc"]
    assert (gc["jax"], gc["pytorch"], gc["jax_variant"]) == (90.0, 30.0, "jax-mixed-remat")
    assert gc["ratio"] == pytest.approx(3.0) and "gradient checkpointing" in gc["baseline"]
    assert "policy_step_tokens_per_s_gc" not in got  # no JAX fp32 remat variant

    assert f["sampler_prefill_tokens_per_s"]["ratio"] == pytest.approx(2.0)
    assert f["sampler_prefill_tokens_per_s"]["spread"]["jax"] == pytest.approx([50.0, 200.0])
    dec = f["sampler_decode_tokens_per_s"]  # 4 rows * 10 tokens / (full - median prefill)
    assert dec["ratio"] == pytest.approx(2.0)
    assert dec["spread"]["jax"] == pytest.approx([40 / 4.0, 40 / 1.0])

    r1 = f["router_latency_ms_per_query_b1"]  # time: ratio pytorch / jax
    assert (r1["jax"], r1["pytorch"]) == pytest.approx((10.0, 20.0))
    assert r1["ratio"] == pytest.approx(2.0) and r1["higher_is_better"] is False
    r8 = f["router_latency_ms_per_query_b8"]
    assert (r8["jax"], r8["pytorch"], r8["ratio"]) == pytest.approx((5.0, 20.0, 4.0))
    assert f["router_over_generation_b1"]["jax"] == pytest.approx(0.01)
    assert f["router_over_generation_b8"]["pytorch"] == pytest.approx(0.02 / 4.0)
    assert f["agent_generation_ms"]["ratio"] == pytest.approx(4.0)

    pub = f["adapter_publish_ms"]
    assert pub["pytorch"] is None and pub["ratio"] is None
    assert pub["spread"]["jax"] == pytest.approx([100.0, 300.0])

    easy = f["verifier_math_easy_items_per_s"]  # best worker count vs math-verify
    assert (easy["jax"], easy["pytorch"], easy["ratio"]) == pytest.approx((40.0, 10.0, 4.0))
    assert f["verifier_code_mbpp_items_per_s"]["pytorch"] is None

    assert {f"peak_rss_mib_{k}" for k in RECORDS} <= set(f)
    sc = result["scaling"]
    assert sc["policy_step"]["b8_L256"] == "skipped" and sc["router"]["b1_L256"] == 0.02
    md = run_all.markdown(result)
    assert "policy_step_tokens_per_s" in md and "| 8 |" in md


def test_failed_and_unreadable_benchmarks_are_recorded_not_fatal():
    runs = {"policy_step": _run(rc=1), "sampler": _run()}
    runs["policy_step"]["log_tail"] = "Traceback: boom"
    broken = {"config": {}, "figures": {}, "_path": "/x/sampler.json"}  # missing fields
    result = _assemble({"policy_step": None, "sampler": broken}, runs)
    check_schema(result)
    assert result["benchmarks"]["policy_step"]["status"] == "failed"
    assert "boom" in result["benchmarks"]["policy_step"]["error"]
    assert result["benchmarks"]["sampler"]["status"] == "failed"
    assert "could not read figures" in result["benchmarks"]["sampler"]["error"]
    assert "Failed: policy_step" in run_all.markdown(result)


def test_run_child_exit_code_peak_rss_and_timeout(tmp_path):
    code = "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('hi'); exit(3)"
    res = run_all.run_child(
        [sys.executable, "-c", code], os.environ, tmp_path / "a.log", 60, echo=False
    )
    assert res["returncode"] == 3 and not res["timed_out"]
    assert res["peak_rss_mib"] >= 250
    assert (tmp_path / "a.log").read_text().strip() == "hi"
    res = run_all.run_child(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        os.environ,
        tmp_path / "b.log",
        1.0,
        echo=False,
    )
    assert res["timed_out"] and res["returncode"] != 0 and res["wall_s"] < 30


def test_newest_result_prefers_complete_records(tmp_path):
    (tmp_path / "router-1.json").write_text(json.dumps({"v": 1}))
    os.utime(tmp_path / "router-1.json", (1, 1))
    (tmp_path / "router-2.json").write_text(json.dumps({"v": 2, "partial": True}))
    assert run_all.newest_result(tmp_path, "router")["v"] == 1
    assert run_all.newest_result(tmp_path, "policy_step") is None


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_quick_suite_writes_valid_json_table_and_plot(tmp_path):
    pytest.importorskip("torch", reason="the suite compares against PyTorch")
    pytest.importorskip("trl", reason="the policy-step baseline uses TRL's loss")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the test session's 8 fake devices are not the benchmark's
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run_all", "--quick", "--quiet"]
        + ["--out-dir", str(tmp_path), "--machine", "ci"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3500,
    )
    jsons = list(tmp_path.glob("*-ci.json"))
    assert len(jsons) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(jsons[0].read_text())
    check_schema(result)
    failed = {
        k: v.get("error", "")[-1500:]
        for k, v in result["benchmarks"].items()
        if v["status"] != "ok"
    }
    assert proc.returncode == 0 and not failed, failed
    names = {f["name"] for f in result["figures"]}
    for must in (
        "policy_step_tokens_per_s",
        "sampler_prefill_tokens_per_s",
        "sampler_decode_tokens_per_s",
        "router_latency_ms_per_query_b1",
        "router_over_generation_b1",
        "adapter_publish_ms",
        "verifier_math_easy_items_per_s",
        "peak_rss_mib_policy_step",
    ):
        assert must in names
    assert jsons[0].with_suffix(".md").read_text().count("\n|") >= len(names)
    assert (tmp_path / result["scaling"]["plot"]).stat().st_size > 0


def test_single_thread_xla_flags_keep_the_callers_flags():
    """``--threads 1`` (run_all, bench_router, bench_sampler) appends to XLA_FLAGS: a flag the
    user set, such as a device count, survives."""
    from benchmarks.common import single_thread_xla_flags

    one = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    assert single_thread_xla_flags(None).split() == one.split()
    got = single_thread_xla_flags("--xla_force_host_platform_device_count=8")
    assert got.split() == ["--xla_force_host_platform_device_count=8", *one.split()]
