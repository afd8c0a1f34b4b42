"""The CPU suite on the default run (embedded SmolLM2, ``configs/cpu_default.yaml``), end to
end through ``scripts/eval_default_run.py`` at its smallest settings."""

import json

import pytest

pytestmark = pytest.mark.slow


def test_default_run_cpu_suite_writes_the_report(tmp_path, monkeypatch, capsys):
    from benchmarks import common
    from scripts import eval_default_run

    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    run = tmp_path / "run"
    argv = [
        "--rounds=1",
        "--limit=1",
        "--max-new-tokens=8",
        "--taus",
        "0.5",
        "0.9",
        "--no-progress",
        f"--run={run}",
        "loop.queries_per_round=2",
        "loop.groups_per_step=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
    ]
    assert eval_default_run.main(argv) == 0
    out = capsys.readouterr().out
    assert "| method | accuracy |" in out and "Router latency" in out

    name = "cpu-full-tau0.7"
    reports = {p.name for p in (run / "eval").iterdir()}
    assert {f"{name}.json", f"{name}.md", f"{name}_accuracy.png"} <= reports
    assert f"{name}_tokens_vs_accuracy.png" in reports
    payload = json.loads((run / "eval" / f"{name}.json").read_text())
    # one record of each dataset of the cpu mixture's ID and OOD files
    by = payload["queries_by_dataset"]
    assert set(by.values()) == {1} and len(by) >= 8
    assert {"humaneval", "ifeval", "arc_challenge"} <= set(by)
    assert set(payload["results"]["cera"]["by_dataset"]) == set(by)
    for m in ("cera", "base", "uniform_vote", "oracle", "cera@0.5", "cera@0.9"):
        r = payload["results"][m]
        assert 0.0 <= r["accuracy"] <= 1.0 and 0 < r["tokens_per_query"] <= 4 * 8

    results = list((tmp_path / "results").glob("eval_default_run-*.json"))
    assert len(results) == 1
    saved = json.loads(results[0].read_text())
    assert saved["benchmark"] == "eval_default_run" and saved["git_commit"]
    copied = {p.name for p in (tmp_path / "results").glob("eval_default_run-*/*")}
    assert reports == copied
