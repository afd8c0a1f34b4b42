"""The full evaluation path on a tiny random model: collection, methods, report files, and a
run directory that evaluation leaves byte-for-byte as it found it."""

import json

import jax
import numpy as np
import pytest

from coevo_jax.eval import evaluate_run, evaluate_system
from coevo_jax.eval.runner import suite_records
from coevo_jax.train.checkpoint import latest_checkpoint
from coevo_jax.train.system import System
from tests.eval._runs import (
    evaluate_tiny_run,
    odd_length_score,
    snapshot,
    snapshot_dirs,
    train_tiny_run,
    write_suite,
)
from tests.train._tiny import tiny_backbone, tiny_config, tiny_records, tiny_trainer

PNG = b"\x89PNG\r\n\x1a\n"


def check_report_files(out_dir, name, datasets):
    """The four report files exist and hold what a reader needs."""
    files = {p.name for p in out_dir.iterdir()}
    assert {
        f"{name}.json",
        f"{name}.md",
        f"{name}_accuracy.png",
        f"{name}_tokens_vs_accuracy.png",
        f"{name}_methods.png",
    } <= files
    for png in (f"{name}_accuracy.png", f"{name}_tokens_vs_accuracy.png", f"{name}_methods.png"):
        data = (out_dir / png).read_bytes()
        assert data.startswith(PNG) and len(data) > 1000
    md = (out_dir / f"{name}.md").read_text()
    assert "| method | accuracy |" in md and "| cera |" in md
    assert all(d in md for d in datasets)
    assert f"({name}_accuracy.png)" in md and f"({name}_tokens_vs_accuracy.png)" in md
    assert f"({name}_methods.png)" in md
    payload = json.loads((out_dir / f"{name}.json").read_text())
    assert set(payload["results"]["cera"]["by_dataset"]) == set(datasets)
    return payload


def test_eval_writes_reports(tmp_path):
    cfg = tiny_config(rounds=1)
    recs = tiny_records(8)
    tr = tiny_trainer(cfg, tmp_path / "run", records=recs)
    tr.run()
    ev = [dict(r, id=f"e{i}", source="toy-" + r["class"]) for i, r in enumerate(tiny_records(6))]
    payload = evaluate_system(
        tr.system,
        ev,
        tmp_path / "eval",
        name="toy",
        max_new_tokens=6,
        taus=(0.3, 0.9),
        score_fn=odd_length_score,
    )
    res = payload["results"]
    assert {"cera", "base", "oracle", "uniform_vote", "random", "top:1", "single:0"} <= set(res)
    assert {"cera@0.3", "cera@0.9"} <= set(res)
    assert 0 < res["cera"]["tokens_per_query"] <= 2 * 6
    assert payload["router_ms"] > 0
    assert payload["router"]["ablation"] == "full"
    assert payload["queries_by_dataset"] == {"toy-math": 3, "toy-reasoning": 3}
    for m, r in res.items():  # intervals, strict and macro metrics (tests/eval/test_protocol.py)
        for key in ("accuracy", "strict", "macro", "macro_strict"):
            assert 0 <= r[f"{key}_ci"][0] <= r[key] <= r[f"{key}_ci"][1] <= 1, (m, key)
    assert set(payload["comparisons"]) == set(res) - {"cera", "cera@0.3", "cera@0.9"}
    assert payload["max_new_tokens"] == 6 and payload["max_new_tokens_source"] == "argument"
    saved = check_report_files(tmp_path / "eval", "toy", ["toy-math", "toy-reasoning"])
    assert saved["queries"] == 6
    tr.close()


def test_evaluate_run_leaves_the_run_untouched(tmp_path):
    run = train_tiny_run(tmp_path / "run")
    suite = write_suite(tmp_path / "suite.jsonl")
    files, dirs = snapshot(run), snapshot_dirs(run)
    assert "config.json" in files and any(f.startswith("tensorboard") for f in files)
    payload = evaluate_tiny_run(run, suite)
    # nothing but RUN/eval/ was written: same files, same bytes, no new files or folders
    assert snapshot(run) == files
    assert snapshot_dirs(run) == dirs
    name = "suite-full-tau0.7"
    assert {p.name for p in (run / "eval").iterdir()} == {
        f"{name}.json",
        f"{name}.md",
        f"{name}_accuracy.png",
        f"{name}_tokens_vs_accuracy.png",
        f"{name}_methods.png",
    }
    saved = check_report_files(run / "eval", name, ["toy-math", "toy-reasoning"])
    assert saved["checkpoint_round"] == 1 and saved["run"] == str(run)
    assert payload["results"]["cera"] == saved["results"]["cera"]


def test_evaluate_run_refuses_a_run_without_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({}))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        evaluate_run(tmp_path, suite="cpu")
    assert {p.name for p in tmp_path.iterdir()} == {"config.json"}


def test_a_system_restores_a_run_and_writes_nothing(tmp_path):
    """Evaluation's view of a run: a System restores the trained state, and neither building
    nor restoring it writes into the run directory."""
    cfg = tiny_config(rounds=1)
    tr = tiny_trainer(cfg, tmp_path / "run", records=tiny_records(4))
    tr.run()
    tr.close()
    before = snapshot(tmp_path / "run")
    system = System(cfg, backbone=tiny_backbone(), engine_dir=tmp_path / "run", warn_dtype=False)
    try:
        host = system.restore(latest_checkpoint(tmp_path / "run" / "checkpoints"))
        assert host["round"] == 1 and system.versions == tr.system.versions
        for a, b in zip(
            jax.tree.leaves(system.arrays()), jax.tree.leaves(tr.system.arrays()), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finally:
        system.close()
    assert snapshot(tmp_path / "run") == before


def test_suite_limit_is_per_dataset(tmp_path):
    recs = [
        {
            "id": f"{s}{i}",
            "source": s,
            "split": "test",
            "class": "math",
            "problem": "1+1?",
            "true_answer": "2",
        }
        for s in "ab"
        for i in range(5)
    ]
    for split in ("eval_id", "eval_ood"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    from coevo_jax.data import read_records

    n_file = len(read_records(tmp_path / "eval_id.jsonl"))
    got = suite_records(tmp_path, "id", limit=2)
    src = [r.source for r in got]
    assert src == ["a", "a", "b", "b"] and n_file == 10
    assert len(suite_records(tmp_path, "cpu", limit=1)) == 4
    assert len(suite_records(tmp_path, "ood")) == 10
    with pytest.raises(ValueError, match="unknown suite"):
        suite_records(tmp_path, "nope")
