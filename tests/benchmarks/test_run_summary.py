"""benchmarks/run_summary.py: a run's cost read from its own records."""

import json

import pytest

from benchmarks import run_summary

TIME_V = """mixture conflict: 100%
\tCommand being timed: "coevo train --config configs/cpu_conflict_center.yaml --out runs/x"
\tUser time (seconds): 9000.10
\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:23:45.50
\tMaximum resident set size (kbytes): 5662310
\tExit status: 0
"""


def test_time_v_report_is_parsed():
    got = run_summary.parse_time_v(TIME_V)
    assert got["command"].startswith("coevo train --config configs/cpu_conflict_center.yaml")
    assert got["wall_s"] == 3600 + 23 * 60 + 45.5
    assert got["max_rss_gib"] == round(5662310 / 2**20, 2)
    assert (
        run_summary.parse_time_v(
            "Elapsed (wall clock) time (h:mm:ss or m:ss): 2:03.5\n"
            'Command being timed: "x"\n'
            "Maximum resident set size (kbytes): 1\n"
        )["wall_s"]
        == 123.5
    )
    with pytest.raises(ValueError, match="runs/x.log: no complete /usr/bin/time -v report"):
        run_summary.parse_time_v("still running", "runs/x.log")


def _metrics(path, rounds):
    rows = [{"probe": {"after_rounds": 0}}]  # a probe-only record is skipped
    for t in range(1, rounds + 1):
        rows.append(
            {
                "round": t,
                "versions": [t, 2 * t, 0, 1],
                "timings": {"round_s": 100.0 + t, "router_s": 0.01 * t},
            }
        )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_main_writes_the_runs_cost(tmp_path):
    _metrics(tmp_path / "metrics.jsonl", 3)
    (tmp_path / "train.log").write_text(TIME_V)
    out = run_summary.main(
        ["--run", str(tmp_path), "--train-log", str(tmp_path / "train.log"),
         "--out", str(tmp_path / "res" / "run.json"), "--notes", "idle cores"]
    )  # fmt: skip
    saved = json.loads((tmp_path / "res" / "run.json").read_text())
    assert saved == out
    assert saved["rounds"] == 3 and saved["policy_steps_per_agent"] == [3, 6, 0, 1]
    assert saved["policy_steps"] == 10
    assert saved["round_s"] == {"min": 101.0, "median": 102.0, "max": 103.0}
    assert saved["rounds_wall_min"] == round(306 / 60, 1) and saved["router_s_median"] == 0.02
    assert saved["wall_min"] == 83.8 and saved["notes"] == "idle cores"
    assert "eval_command" not in saved


def test_a_run_without_rounds_is_refused_by_name(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="metrics.jsonl: no round records"):
        run_summary.main(["--run", str(tmp_path), "--out", str(tmp_path / "run.json")])


def test_a_stopped_and_resumed_run_sums_its_processes(tmp_path):
    _metrics(tmp_path / "metrics.jsonl", 3)
    (tmp_path / "a.log").write_text(TIME_V)
    resumed = TIME_V.replace(
        "--config configs/cpu_conflict_center.yaml --out runs/x", "--resume runs/x"
    )
    resumed = resumed.replace("1:23:45.50", "6:00").replace("5662310", "6000000")
    (tmp_path / "b.log").write_text(resumed)
    out = run_summary.main(
        ["--run", str(tmp_path), "--train-log", str(tmp_path / "a.log"), str(tmp_path / "b.log"),
         "--out", str(tmp_path / "run.json")]
    )  # fmt: skip
    assert out["command"].startswith("coevo train --config")
    assert out["resume_commands"] == ["coevo train --resume runs/x"]
    assert out["wall_min_by_process"] == [83.8, 6.0] and out["wall_min"] == 89.8
    assert out["max_rss_gib"] == round(6000000 / 2**20, 2)
