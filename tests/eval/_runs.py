"""Tiny trained runs on disk, for the evaluation tests."""

import json
from pathlib import Path

from coevo_jax._config import from_dict, to_dict
from coevo_jax.train.config import TrainConfig
from tests.train._tiny import tiny_backbone, tiny_config, tiny_records, tiny_trainer


def odd_length_score(records, completions):
    """A deterministic stand-in verifier with variance across agents and queries."""
    return [float(len(c) % 2) for c in completions]


def train_tiny_run(run_dir: Path, *, router: dict | None = None, loop: dict | None = None) -> Path:
    """Trains (1 round, checkpoint at the end) a tiny run with router/loop overrides."""
    d = to_dict(tiny_config(rounds=1))
    d["router"].update(router or {})
    d["loop"].update(loop or {})
    cfg = from_dict(TrainConfig, d)
    tr = tiny_trainer(cfg, run_dir, records=tiny_records(8))
    try:
        tr.run()
    finally:
        tr.close()
    return run_dir


def write_suite(path: Path, n: int = 6) -> Path:
    """A JSONL evaluation suite of ``n`` records from two toy datasets."""
    recs = [dict(r, id=f"e{i}", source="toy-" + r["class"]) for i, r in enumerate(tiny_records(n))]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def snapshot(root: Path, skip: str = "eval") -> dict[str, bytes]:
    """Every file under ``root`` (but ``root/skip``), as relative path -> bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != skip
    }


def snapshot_dirs(root: Path, skip: str = "eval") -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_dir() and p.relative_to(root).parts[0] != skip
    }


def evaluate_tiny_run(run: Path, suite: Path) -> dict:
    """``evaluate_run`` on a tiny run with the settings every eval test uses."""
    from coevo_jax.eval.runner import evaluate_run

    return evaluate_run(
        run,
        suite=str(suite),
        backbone=tiny_backbone(),
        max_new_tokens=6,
        taus=(0.3, 0.9),
        score_fn=odd_length_score,
    )
