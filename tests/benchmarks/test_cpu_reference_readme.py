"""The README's reference-experiment section says what the committed result files say."""

import json
from pathlib import Path

from coevo_jax.eval.report import readme_table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "cpu_reference"


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Does co-evolution work?")
    return text[start : text.index("\n## ", start + 1)]


def test_table_is_rendered_from_the_committed_report():
    report = json.loads((RESULTS / "report.json").read_text())
    assert readme_table(report).strip() in _section()
    assert sum(report["queries_by_dataset"].values()) >= 200


def test_routing_and_probe_numbers_match_the_committed_files():
    section = _section()
    routing = json.loads((RESULTS / "routing.json").read_text())
    for when in ("start", "end"):
        r = routing[when]
        assert f"{r['mean_active']:.2f}" in section, when
        assert f"{r['nmi']:.2f}" in section, when
    probes = [json.loads(x)["probe"] for x in (RESULTS / "probes.jsonl").read_text().splitlines()]
    assert f"{probes[0]['macro_reward']:.2f}" in section
    assert f"{probes[-1]['macro_reward']:.2f}" in section
    for png in ("probe_curves.png",):
        assert (RESULTS / png).is_file() and f"cpu_reference/{png}" in section


def test_whitened_run_numbers_match_its_committed_files():
    section = _section()
    whitened = ROOT / "benchmarks" / "results" / "cpu_reference_whitened"
    routing = json.loads((whitened / "routing.json").read_text())
    for when in ("start", "end"):
        assert f"{routing[when]['mean_active']:.2f}" in section, when
        assert f"{routing[when]['nmi']:.2f}" in section, when
    report = json.loads((whitened / "report.json").read_text())
    cera = report["results"]["cera"]
    assert f"{100 * cera['macro']:.1f}" in section
    assert f"{cera['agents_per_query']:.2f}" in section
    assert "cpu_reference_whitened/probe_curves.png" in section


def test_routing_headroom_numbers_match_both_reports():
    """The oracle and best-single macro figures quoted as the router's headroom."""
    section = _section()
    for name in ("cpu_reference", "cpu_reference_whitened"):
        res = json.loads((ROOT / "benchmarks" / "results" / name / "report.json").read_text())
        results = res["results"]
        best = max(v["macro"] for k, v in results.items() if k.startswith("single:"))
        assert f"{100 * results['oracle']['macro']:.1f}" in section, name
        assert f"{100 * best:.1f}" in section, name


def test_conflict_run_numbers_match_its_committed_files():
    section = _section()
    conflict = ROOT / "benchmarks" / "results" / "cpu_conflict"
    report = json.loads((conflict / "report.json").read_text())
    assert readme_table(report).strip() in section
    assert sum(report["queries_by_dataset"].values()) >= 200
    routing = json.loads((conflict / "routing.json").read_text())
    for when in ("start", "end"):
        assert f"{routing[when]['mean_active']:.2f}" in section, when
        assert f"{routing[when]['nmi']:.2f}" in section, when
    probes = [json.loads(x)["probe"] for x in (conflict / "probes.jsonl").read_text().splitlines()]
    assert f"{probes[0]['macro_reward']:.2f}" in section
    assert f"{probes[-1]['macro_reward']:.2f}" in section
    base = json.loads((conflict / "base_rewards.json").read_text())
    for d, v in base["domains"].items():
        assert f"{v['reward']:.2f}" in section, d
    lin = routing["feature_geometry"]["linear_probe"]
    assert f"{100 * lin['accuracy']:.1f} % accuracy" in section
    assert (conflict / "probe_curves.png").is_file() and "cpu_conflict/probe_curves.png" in section
