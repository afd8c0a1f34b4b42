"""The CPU suite on the default run: train ``configs/cpu_default.yaml`` (the embedded
SmolLM2-135M-Instruct) for a few rounds, then ``coevo eval`` it with every baseline.

    python -m scripts.eval_default_run [--rounds N] [--limit N] [--run DIR]

``--run DIR`` reuses a run directory that already holds a checkpoint (no training); else a
run is trained into ``DIR`` (default ``runs/eval_default-<time>``) with the same machinery as
``coevo train`` (``key=value`` overrides after the flags, as there). The evaluation writes
its report under ``RUN/eval/`` (and nowhere else in the run); this script copies the
report's files to ``benchmarks/results/eval_default_run-<time>/``, writes the usual result
JSON (figures, config, machine, git commit) beside it and prints the table.

This is an end-to-end check and a record of the figures, not a JAX-vs-PyTorch speed race:
the model is too small and the run too short for the accuracies to mean much beyond
"the path works and the numbers are plausible".
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import sys
import time
from pathlib import Path

from benchmarks import common


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.eval_default_run", description=__doc__)
    p.add_argument("--rounds", type=int, default=2, help="training rounds (default 2)")
    p.add_argument("--limit", type=int, default=2, help="eval records per dataset (default 2)")
    p.add_argument("--run", help="reuse this run if it holds a checkpoint, else train into it")
    p.add_argument("--suite", default="cpu", help="cpu | id | ood (default cpu)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="eval generation budget")
    p.add_argument("--taus", type=float, nargs="*", default=[0.3, 0.5, 0.7, 0.9])
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="training config overrides")
    return p.parse_args(argv)


def train(run_dir: Path, rounds: int, overrides: list[str], progress: bool) -> float:
    """Trains the default config for ``rounds`` rounds into ``run_dir``; returns seconds."""
    from coevo_jax.train.config import load_config
    from coevo_jax.train.loop import Trainer

    cfg = load_config(None, [f"loop.rounds={rounds}", *overrides])
    t0 = time.perf_counter()
    trainer = Trainer(cfg, run_dir, progress=progress)
    try:
        trainer.run()
    finally:
        trainer.close()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from coevo_jax.eval.report import markdown_table
    from coevo_jax.eval.runner import evaluate_run, report_name
    from coevo_jax.train.checkpoint import latest_checkpoint

    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = Path(args.run or f"runs/eval_default-{stamp}")
    train_s = None
    if latest_checkpoint(run_dir / "checkpoints") is None:
        print(f"training {args.rounds} round(s) of configs/cpu_default.yaml into {run_dir}")
        train_s = train(run_dir, args.rounds, args.overrides, not args.no_progress)
    else:
        print(f"reusing the trained run {run_dir}")
    t0 = time.perf_counter()
    payload = evaluate_run(
        run_dir,
        suite=args.suite,
        limit=args.limit,
        taus=tuple(args.taus),
        max_new_tokens=args.max_new_tokens,
        progress=not args.no_progress,
    )
    eval_s = time.perf_counter() - t0

    from coevo_jax._config import from_dict
    from coevo_jax.train.config import TrainConfig

    cfg = from_dict(TrainConfig, json.loads((run_dir / "config.json").read_text()))
    name = report_name(args.suite, cfg.router, payload["tau"])
    out = common.RESULTS / f"eval_default_run-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted((run_dir / "eval").glob(f"{name}*")):
        shutil.copy2(f, out / f.name)
    figures = [
        {
            "method": m,
            "accuracy": r["accuracy"],
            **{f"acc:{d}": v for d, v in r["by_dataset"].items()},
            "tokens_per_query": r["tokens_per_query"],
            "agents_per_query": r["agents_per_query"],
        }
        for m, r in payload["results"].items()
    ]
    path = common.write_result(
        "eval_default_run",
        {
            "command": "python -m scripts.eval_default_run "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "config": {
                "rounds": payload.get("checkpoint_round"),
                "limit_per_dataset": args.limit,
                "suite": args.suite,
                "max_new_tokens": args.max_new_tokens,
                "taus": list(args.taus),
                "run": str(run_dir),
                "overrides": list(args.overrides),
                "router": payload["router"],
            },
            "timings": {"train_s": train_s, "eval_s": eval_s, "router_ms": payload["router_ms"]},
            "report_dir": str(out),
            "figures": figures,
            "eval": payload,
        },
    )
    print()
    print(payload["description"])
    print(markdown_table(payload["results"], payload["router_ms"]))
    train_txt = "reused" if train_s is None else f"{train_s:.0f} s"
    print(f"train: {train_txt}; eval: {eval_s:.0f} s")
    print(f"report: {run_dir / 'eval' / name}.md (copied to {out}); result JSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
