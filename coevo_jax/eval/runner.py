"""Evaluating a training run: restore it, collect one generation pass, compute every method."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coevo_jax._config import from_dict
from coevo_jax.eval.collect import collect
from coevo_jax.eval.methods import evaluate_methods
from coevo_jax.eval.report import write_report

SUITES = {"cpu": ("eval_id", "eval_ood"), "id": ("eval_id",), "ood": ("eval_ood",)}


def suite_records(data_dir: Path, suite: str, limit: int | None = None) -> list[Any]:
    """Records of ``suite`` from a built mixture directory (``limit`` per split file)."""
    from coevo_jax.data import read_records

    if suite not in SUITES:
        path = Path(suite)
        if not path.is_file():
            raise ValueError(f"unknown suite {suite!r}: use cpu, id, ood or a JSONL file")
        recs = read_records(path)
        return recs[:limit] if limit else recs
    out = []
    for split in SUITES[suite]:
        f = data_dir / f"{split}.jsonl"
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing; build the mixture with `coevo data build`")
        recs = read_records(f)
        out += recs[:limit] if limit else recs
    return out


def evaluate_trainer(
    trainer: Any,
    records: list[Any],
    out_dir: Path,
    *,
    name: str,
    tau: float | None = None,
    taus: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9),
    max_new_tokens: int = 256,
    baselines: tuple[str, ...] = ("base", "single", "uniform_vote", "random", "top", "oracle"),
    score_fn=None,
) -> dict[str, Any]:
    """Runs the collection pass and every method; writes the report; returns the payload."""
    tau = trainer.cfg.eval_tau if tau is None else tau
    c = collect(trainer, records, max_new_tokens=max_new_tokens, score_fn=score_fn)
    results = evaluate_methods(c, tau=tau, taus=taus, baselines=baselines)
    payload = {
        "description": f"{len(records)} queries, tau={tau}, greedy, max_new_tokens={max_new_tokens}",
        "tau": tau,
        "queries": len(records),
        "router_ms": c.router_ms,
        "results": results,
    }
    write_report(out_dir, name, payload)
    return payload


def evaluate_run(
    run_dir: str | Path, *, suite: str = "cpu", limit: int | None = None, **kw
) -> dict[str, Any]:
    """Restores ``run_dir``'s last checkpoint and evaluates it on ``suite``."""
    from coevo_jax.train.config import TrainConfig
    from coevo_jax.train.loop import Trainer

    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{cfg_path}: not a training run directory")
    cfg = from_dict(TrainConfig, json.loads(cfg_path.read_text()))
    data_dir = Path(cfg.data.path) if cfg.data.path else run_dir / "data"
    records = suite_records(data_dir, suite, limit)
    trainer = Trainer(cfg, run_dir, progress=False)
    try:
        if not trainer.restore():
            raise FileNotFoundError(f"{run_dir}: no checkpoint to evaluate")
        tau = kw.pop("tau", None)
        name = f"{suite}-tau{trainer.cfg.eval_tau if tau is None else tau:g}"
        return evaluate_trainer(trainer, records, run_dir / "eval", name=name, tau=tau, **kw)
    finally:
        trainer.close()
