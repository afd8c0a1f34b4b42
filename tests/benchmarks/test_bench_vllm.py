"""bench_vllm's figure row from its committed records (the run itself needs the vLLM venv).

Figures are never asserted: only that each committed record yields a well-formed row whose
ratio is vLLM's tokens/s over the in-process engine's.
"""

import json
from pathlib import Path

import pytest

from benchmarks import bench_vllm

RESULTS = sorted(
    (Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("vllm-*.json")
)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_committed_records_give_the_tokens_per_s_row(path):
    rec = json.loads(path.read_text())
    (row,) = bench_vllm.figures(rec)
    rollout = rec["figures"]["rollout"]
    assert row["name"] == "vllm_vs_in_process_tokens_per_s" and row["unit"] == "tokens/s"
    assert row["jax"] == rollout["vllm"]["tokens_per_s"]
    assert row["pytorch"] == rollout["in_process"]["tokens_per_s"]
    assert row["ratio"] == pytest.approx(rollout["vllm_over_in_process"])


def test_there_is_a_committed_record():
    assert RESULTS, "benchmarks/results/vllm-*.json is missing"
