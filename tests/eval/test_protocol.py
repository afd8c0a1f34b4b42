"""The evaluation protocol end to end: ``coevo eval`` on a tiny run writes intervals, strict and
macro metrics, paired comparisons and the config's token budget; ``readme_table`` renders
the README table from the report JSON."""

import json

import pytest

from coevo_jax.eval import runner
from coevo_jax.eval.report import METRICS, readme_methods, readme_table
from tests.eval._runs import odd_length_score, train_tiny_run, write_suite
from tests.train._tiny import tiny_backbone

pytestmark = pytest.mark.slow  # trains a tiny run (about a minute on two busy cores)

NAME = "suite-full-tau0.7"


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, monkeypatch_module):
    """A tiny run evaluated through the ``coevo`` command line (no --max-new-tokens)."""
    from coevo_jax.cli import main

    root = tmp_path_factory.mktemp("protocol")
    run = train_tiny_run(root / "run")
    suite = write_suite(root / "suite.jsonl", n=8)
    real = runner.evaluate_run

    def tiny_evaluate_run(*a, **kw):  # the tiny model and a stand-in verifier
        return real(*a, backbone=tiny_backbone(), score_fn=odd_length_score, **kw)

    monkeypatch_module.setattr(runner, "evaluate_run", tiny_evaluate_run)
    args = ["eval", "--run", str(run), "--suite", str(suite), "--taus", "0.3", "--no-progress"]
    assert main(args) == 0
    return run, json.loads((run / "eval" / f"{NAME}.json").read_text())


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _well_formed(lo, point, hi, low=0.0, high=1.0):
    return low <= lo <= point <= hi <= high


def test_budget_comes_from_the_run_config(evaluated):
    run, payload = evaluated
    cfg = json.loads((run / "config.json").read_text())
    assert payload["max_new_tokens"] == cfg["rollout"]["max_new_tokens"] == 8
    assert payload["max_new_tokens_source"] == "rollout.max_new_tokens"
    assert "max_new_tokens=8 (rollout.max_new_tokens)" in payload["description"]
    # no method generates past the budget
    r = payload["results"]
    assert all(v["tokens_per_query"] <= 8 * v["agents_per_query"] for v in r.values())


def test_every_method_has_intervals_strict_and_macro(evaluated):
    _, payload = evaluated
    res = payload["results"]
    want = {"cera", "cera@0.3", "base", "single:0", "single:1", "uniform_vote", "random"}
    want |= {"top:1", "top:2", "oracle"}  # two agents: top-3 is top-2's limit
    assert set(res) == want
    for name, r in res.items():
        for key in ("accuracy", "strict", "macro", "macro_strict"):
            assert _well_formed(r[f"{key}_ci"][0], r[key], r[f"{key}_ci"][1]), (name, key)
        for d, acc in r["by_dataset"].items():
            assert _well_formed(r["by_dataset_ci"][d][0], acc, r["by_dataset_ci"][d][1])
            assert _well_formed(
                r["strict_by_dataset_ci"][d][0],
                r["strict_by_dataset"][d],
                r["strict_by_dataset_ci"][d][1],
            )
        assert set(r["by_dataset"]) == {"toy-math", "toy-reasoning"}
        assert r["tokens_per_query"] > 0 and r["agents_per_query"] >= 1
    assert payload["bootstrap"] == {
        "method": "percentile",
        "confidence": 0.95,
        "n_resamples": 2000,
        "seed": 0,
    }
    assert payload["metrics"] == METRICS


def test_paired_comparisons_against_each_baseline(evaluated):
    _, payload = evaluated
    cmp = payload["comparisons"]
    assert set(cmp) == set(payload["results"]) - {"cera", "cera@0.3"}
    for name, entry in cmp.items():
        for metric in ("accuracy", "strict"):
            m = entry[metric]
            assert _well_formed(m["diff_ci"][0], m["diff"], m["diff_ci"][1], -1, 1), name
            assert _well_formed(
                m["macro_diff_ci"][0], m["macro_diff"], m["macro_diff_ci"][1], -1, 1
            )
            # the stand-in verifier scores 0/1, so the test is the exact McNemar one
            assert m["test"] == "mcnemar_exact"
            assert 0 <= m["p_value"] <= m["p_holm"] <= 1
            diff = payload["results"]["cera"][metric] - payload["results"][name][metric]
            assert m["diff"] == pytest.approx(diff)


def test_markdown_report_names_every_column(evaluated, capsys):
    run, payload = evaluated
    md = (run / "eval" / f"{NAME}.md").read_text()
    head = md[md.index("| method |") :].splitlines()[0]
    columns = [c.strip() for c in head.strip("|").split("|")]
    assert columns[:5] == ["method", "accuracy", "strict", "macro", "macro strict"]
    assert columns[-4:] == ["Δ accuracy", "p", "Δ strict", "p strict"]
    legend = md[md.index("- accuracy:") :]
    for col in ("accuracy:", "strict:", "macro / macro strict:", "toy-math, toy-reasoning:"):
        assert f"- {col}" in legend
    for col in ("tokens/query:", "agents/query:", "Δ accuracy / Δ strict:", "p / p strict:"):
        assert f"- {col}" in legend
    assert "Token budget: 8 new tokens (rollout.max_new_tokens)" in md
    lo, hi = payload["results"]["cera"]["accuracy_ci"]
    assert f"[{100 * lo:.1f}, {100 * hi:.1f}]" in md


def test_readme_table_renders_the_report(evaluated):
    run, payload = evaluated
    path = run / "eval" / f"{NAME}.json"
    table = readme_table(path)
    assert table == readme_table(payload)
    rows = table.splitlines()
    assert rows[0].startswith("| method | accuracy % [95% CI] | strict % [95% CI] |")
    names = [r.split("|")[1].strip() for r in rows[2:]]
    order = ["cera", "base", "single:0", "single:1", "uniform_vote", "random", "top:1", "top:2"]
    assert readme_methods(payload["results"]) == [*order, "oracle"]
    assert names == ["CERA-MoA", *order[1:], "oracle"]
    r, c = payload["results"]["top:2"], payload["comparisons"]["top:2"]["accuracy"]
    row = rows[2 + names.index("top:2")]
    a_lo, a_hi = r["accuracy_ci"]
    assert f"| {100 * r['accuracy']:.1f} [{100 * a_lo:.1f}, {100 * a_hi:.1f}] |" in row
    assert f"| {r['tokens_per_query']:.1f} | {r['agents_per_query']:.2f} |" in row
    assert f"| {100 * c['macro_diff']:+.1f} [" in row
    assert rows[2].endswith("| - | - |")  # CERA-MoA is not compared with itself
