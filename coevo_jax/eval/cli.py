"""``coevo eval``: evaluate a run (inference routing + aggregation) or compare runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a training run against baselines, or compare runs")
    p.add_argument("--run", help="run directory written by coevo train")
    p.add_argument("--suite", default="cpu", help="cpu | id | ood | a JSONL file of records")
    p.add_argument(
        "--tau", type=float, default=None, help="inference threshold (default: the run's)"
    )
    p.add_argument(
        "--taus", type=float, nargs="*", default=[0.3, 0.5, 0.7, 0.9], help="tau sweep for the plot"
    )
    p.add_argument("--limit", type=int, default=None, help="records per split file")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--no-baselines", action="store_true")
    p.add_argument(
        "--compare", nargs="+", metavar="RUN_DIR", help="print a table across runs' latest reports"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.compare:
        from coevo_jax.eval.report import compare_table

        runs = {}
        for d in args.compare:
            reports = sorted(Path(d, "eval").glob("*.json"), key=lambda p: p.stat().st_mtime)
            if not reports:
                raise SystemExit(f"{d}: no eval report; run `coevo eval --run {d}` first")
            runs[Path(d).name] = json.loads(reports[-1].read_text())
        print(compare_table(runs))
        return 0
    if not args.run:
        raise SystemExit("coevo eval: give --run RUN_DIR or --compare RUN_A RUN_B ...")
    from coevo_jax.eval.report import markdown_table
    from coevo_jax.eval.runner import evaluate_run

    payload = evaluate_run(
        args.run,
        suite=args.suite,
        limit=args.limit,
        tau=args.tau,
        taus=tuple(args.taus),
        max_new_tokens=args.max_new_tokens,
        baselines=()
        if args.no_baselines
        else ("base", "single", "uniform_vote", "random", "top", "oracle"),
    )
    print(markdown_table(payload["results"], payload["router_ms"]))
    print(f"report written under {Path(args.run) / 'eval'}")
    return 0
