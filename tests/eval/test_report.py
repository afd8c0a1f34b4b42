"""Report tables from hand-made payloads: the README table and the across-run table."""

import json

import pytest

from coevo_jax.eval.methods import compare_to_reference, method_outcomes, sources, summarise
from coevo_jax.eval.report import compare_table, markdown_table, readme_table
from tests.eval.test_methods import _collected


@pytest.fixture
def payload():
    c = _collected()
    outcomes = method_outcomes(c, tau=0.7)
    src = sources(c)
    return {
        "results": {k: summarise(o, src) for k, o in outcomes.items()},
        "comparisons": compare_to_reference(outcomes, src),
    }


def _rows(table):
    return {r.split("|")[1].strip(): r for r in table.splitlines()[2:]}


def test_readme_table_quotes_the_report(payload, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(payload))
    table = readme_table(path)
    assert table == readme_table(payload)
    rows = _rows(table)
    assert list(rows) == [
        "CERA-MoA",
        "base",
        "single:0",
        "single:1",
        "single:2",
        "uniform_vote",
        "random",
        "top:1",
        "top:2",
        "top:3",
        "oracle",
    ]
    # base: 1/3 right, 4 tokens per query, macro (gsm8k 0.5 + mbpp 0) / 2; CERA-MoA:
    # gsm8k 0.5, mbpp 1.0 -> CERA-MoA - base = +0.5 macro
    r = payload["results"]["base"]
    lo, hi = r["accuracy_ci"]
    assert rows["base"].startswith(f"| base | 33.3 [{100 * lo:.1f}, {100 * hi:.1f}] |")
    assert "| 25.0 [0.0, 50.0] | 4.0 | 1.00 | +50.0 [" in rows["base"]
    assert rows["CERA-MoA"].endswith("| - | - |")


def test_markdown_table_without_intervals_still_renders():
    results = {
        "cera": {
            "accuracy": 0.5,
            "by_dataset": {"a": 0.5},
            "tokens_per_query": 3.0,
            "agents_per_query": 1.0,
        }
    }
    table = markdown_table(results)
    assert "| cera | 50.0 |  |  |  | 50.0 | 3.0 | 1.00 |" in table


def test_compare_table_shows_macro_and_strict(payload):
    old = {
        "results": {
            "cera": {
                k: payload["results"]["cera"][k]
                for k in ("accuracy", "by_dataset", "tokens_per_query", "agents_per_query")
            }
        }
    }
    table = compare_table({"new": payload, "old": old})
    assert table.splitlines()[0] == (
        "| run | router | gsm8k | mbpp | avg | macro | strict | tokens/query | agents/query |"
    )
    rows = _rows(table)
    r = payload["results"]["cera"]
    assert f"| {100 * r['macro']:.1f} [{100 * r['macro_ci'][0]:.1f}, " in rows["new"]
    assert "| 66.7 | - | - |" in rows["old"]
