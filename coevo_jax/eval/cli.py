"""``coevo eval``: evaluate a run (inference routing + aggregation) or compare runs.

A run trained with an ablation router (``router.head``, ``router.feature_layers``,
``router.routing: top_k``, no exploration, no margin) is evaluated with the same command;
its report names the ablation, and ``--compare`` puts it beside the full router.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rollout_bridge.engines import engine_arg

BASELINES = ("base", "single", "uniform_vote", "random", "top", "oracle")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a training run against baselines, or compare runs",
        description="Evaluate RUN_DIR's last checkpoint (read-only: only RUN_DIR/eval/ is "
        "written) with inference routing and aggregation, against baselines; or print a "
        "paper-style table across runs' reports with --compare.",
    )
    p.add_argument("--run", help="run directory written by coevo train")
    p.add_argument("--suite", default="cpu", help="cpu | id | ood | a JSONL file of records")
    p.add_argument(
        "--tau", type=float, default=None, help="inference threshold (default: the run's)"
    )
    p.add_argument(
        "--taus", type=float, nargs="*", default=[0.3, 0.5, 0.7, 0.9], help="tau sweep for the plot"
    )
    p.add_argument("--limit", type=int, default=None, help="records per dataset (source)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="generation budget (default: the run's rollout.max_new_tokens)",
    )
    p.add_argument("--no-baselines", action="store_true", help="evaluate the run's router only")
    p.add_argument(
        "--baselines",
        nargs="+",
        choices=BASELINES,
        default=None,
        help=f"a subset of the baselines (default: all of {', '.join(BASELINES)})",
    )
    p.add_argument(
        "--engine",
        type=engine_arg,
        default=None,
        help="rollout engine: inprocess, http or vllm (default: the run's rollout.engine); "
        "vllm starts its own server",
    )
    p.add_argument("--vllm-python", help="vllm engine: interpreter that imports vllm")
    p.add_argument("--url", action="append", help="http engine: server URL (repeat per group)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--compare", nargs="+", metavar="RUN_DIR", help="print a table across runs' latest reports"
    )
    p.set_defaults(func=main)


def latest_report(run_dir: str | Path) -> dict:
    """The newest ``RUN/eval/*.json`` report of a run."""
    reports = sorted(Path(run_dir, "eval").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        raise SystemExit(f"{run_dir}: no eval report; run `coevo eval --run {run_dir}` first")
    return json.loads(reports[-1].read_text())


def _saved_rollout(run_dir: str) -> dict:
    """The ``rollout`` section of ``run_dir``'s saved config; ``{}`` when there is no config
    (the runner then says it is not a run directory).

    Raises:
      ConfigError: ``config.json`` is not JSON.
    """
    saved = Path(run_dir, "config.json")
    if not saved.is_file():
        return {}
    from coevo_jax._config import read_saved_config

    data = read_saved_config(saved)
    rollout = data.get("rollout") if isinstance(data, dict) else None
    return rollout if isinstance(rollout, dict) else {}


def _check_engine(args: argparse.Namespace) -> None:
    """Fails before a model loads when the engine is vllm and no vLLM interpreter exists."""
    saved = _saved_rollout(args.run)
    from rollout_bridge.engines import engine_spec

    if not engine_spec(args.engine or saved.get("engine") or "inprocess").needs_vllm:
        return
    from rollout_bridge.cli import require_vllm

    python = args.vllm_python or saved.get("vllm_python")
    option = "--vllm-python" if args.vllm_python or not python else "the run's rollout.vllm_python"
    require_vllm(python, option=option, how="pass --vllm-python PATH")


def main(args: argparse.Namespace) -> int:
    if args.compare:
        from coevo_jax.eval.report import compare_table

        runs = {Path(d).name or str(d): latest_report(d) for d in args.compare}
        print(compare_table(runs))
        return 0
    if not args.run:
        raise SystemExit("coevo eval: give --run RUN_DIR or --compare RUN_A RUN_B ...")
    _check_engine(args)
    from coevo_jax.eval.report import markdown_table
    from coevo_jax.eval.runner import evaluate_run

    if args.no_baselines:
        baselines: tuple[str, ...] = ()
    else:
        baselines = tuple(args.baselines) if args.baselines else BASELINES
    payload = evaluate_run(
        args.run,
        suite=args.suite,
        limit=args.limit,
        tau=args.tau,
        taus=tuple(args.taus),
        max_new_tokens=args.max_new_tokens,
        baselines=baselines,
        progress=not args.no_progress,
        engine=args.engine,
        vllm_python=args.vllm_python,
        urls=args.url,
    )
    print(payload["description"])
    print(markdown_table(payload["results"], payload["router_ms"], payload.get("comparisons")))
    print(f"report written under {Path(args.run) / 'eval'}")
    return 0
