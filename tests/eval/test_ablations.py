"""Ablation routers (the router issue's heads, features, routing rules) evaluated through the
same harness as the full router, and the comparison table across their runs."""

import argparse

import pytest

from coevo_jax.eval.cli import main as eval_main
from coevo_jax.eval.runner import ablation_name
from coevo_jax.router import RouterConfig
from tests.eval._runs import evaluate_tiny_run, snapshot, train_tiny_run, write_suite
from tests.eval.test_eval_path import check_report_files

ABLATIONS = {
    "regression-head+final-layer": ({"head": "regression", "feature_layers": "final"}, {}),
    "classification-head+top-2": (
        {"head": "classification", "routing": "top_k", "top_k": 2},
        {},
    ),
    "no-exploration+no-margin+tau-mismatch": (
        {"c_ucb": 0.0, "w_ent": 0.0, "unbounded_push": True},
        {"eval_tau": 0.5},
    ),
}


def test_ablation_names():
    assert ablation_name(RouterConfig()) == "full"
    assert ablation_name(RouterConfig(head="regression")) == "regression-head"
    assert ablation_name(RouterConfig(routing="top_k", top_k=3)) == "top-3"
    assert ablation_name(RouterConfig(), eval_tau=0.5) == "tau-mismatch"
    # a top-k router has no tau, so a different eval tau is no mismatch
    assert ablation_name(RouterConfig(routing="top_k"), eval_tau=0.5) == "top-1"


_RUNS: dict = {}


def ablation_run(label, root):
    """Trains and evaluates the ``label`` ablation once per session (cached)."""
    if label not in _RUNS:
        router, loop = ABLATIONS[label]
        suite = write_suite(root / "suite.jsonl")
        run = train_tiny_run(root / label, router=router, loop=loop)
        before = snapshot(run)
        payload = evaluate_tiny_run(run, suite)
        assert snapshot(run) == before
        _RUNS[label] = (run, payload)
    return _RUNS[label]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("ablations")


# one ablation in the fast set (about a tiny run's time); the other two with the slow tests
PARAMS = [
    pytest.param(label, marks=() if k == 0 else pytest.mark.slow)
    for k, label in enumerate(ABLATIONS)
]


@pytest.mark.parametrize("label", PARAMS)
def test_ablation_run_evaluates_and_writes_its_report(root, label):
    run, payload = ablation_run(label, root)
    router, loop = ABLATIONS[label]
    assert payload["router"]["ablation"] == label
    reports = sorted(p.stem for p in (run / "eval").glob("*.json"))
    assert len(reports) == 1 and label in reports[0]
    saved = check_report_files(run / "eval", reports[0], ["toy-math", "toy-reasoning"])
    assert saved["router"]["head"] == router.get("head", "familiarity")
    assert saved["router"]["feature_layers"] == router.get("feature_layers", "mid")
    res = payload["results"]
    if router.get("routing") == "top_k":
        # the run's own rule: exactly k agents per query, no tau sweep
        assert res["cera"]["agents_per_query"] == router["top_k"]
        assert res["cera"] == res[f"top:{router['top_k']}"]
        assert not any(k.startswith("cera@") for k in res)
    else:
        assert {"cera@0.3", "cera@0.9"} <= set(res)
        assert payload["tau"] == loop.get("eval_tau", 0.7)
        assert 1 <= res["cera"]["agents_per_query"] <= 2
    assert res["oracle"]["accuracy"] >= max(
        res["single:0"]["accuracy"], res["single:1"]["accuracy"]
    )


@pytest.mark.slow
def test_compare_table_names_each_router(root, capsys):
    runs = {label: ablation_run(label, root) for label in ABLATIONS}
    dirs = [str(run) for run, _ in runs.values()]
    args = argparse.Namespace(compare=dirs)
    assert eval_main(args) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("|")]
    assert lines[0].startswith("| run | router | toy-math | toy-reasoning | avg |")
    assert len(lines) == 2 + len(ABLATIONS)
    for label, (run, payload) in runs.items():
        row = next(ln for ln in lines if ln.startswith(f"| {run.name} |"))
        assert f"| {label} |" in row
        assert f"{100 * payload['results']['cera']['accuracy']:.1f}" in row
