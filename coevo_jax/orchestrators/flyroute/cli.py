"""``coevo flyroute replay|eval|report``.

- ``replay``: builds the benchmark from unified records, registers one agent per class,
  replays the training stream through FlyRoute with checkpoints, evaluates each checkpoint
  and the seed-description baseline, writes ``results.json``, the profile checkpoints, a
  live profile journal, and the report (table + plots).
- ``eval``: evaluates a saved profile file on the benchmark's test split.
- ``report``: re-renders the report from a ``results.json``.

The LLM: ``--llm engine`` (default) uses ``rollout_bridge.text.EngineTextLLM`` over the
in-process engine, imported only when asked for; ``--llm MODULE:FACTORY`` calls
``FACTORY(model=..., agents=[...])`` for any other :class:`TextLLM` (scripted stand-ins in
tests, other servers).

The functions below import the engine and the FlyRoute modules when they run: ``coevo``
imports every subcommand's CLI module to build its parser, and should not load them all.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "flyroute", help="FlyRoute: self-evolving agent profiles for task routing"
    )
    sub = p.add_subparsers(dest="flyroute_command", metavar="ACTION")

    def common(sp: argparse.ArgumentParser) -> None:
        src = sp.add_mutually_exclusive_group()
        src.add_argument("--records", help="unified records JSONL (id, class, problem, ...)")
        src.add_argument(
            "--offline",
            default=None,
            help="comma-separated offline sources (coevo_jax.data) used when --records is not "
            "given; default gsm8k,mbpp,ifeval,arc_challenge",
        )
        sp.add_argument("--out", required=True, help="output directory")
        sp.add_argument("--config", help="FlyRouteConfig YAML: a path or a bundled config's name")
        sp.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="config override (repeatable); the same as a positional key=value",
        )
        sp.add_argument(
            "key_values",
            nargs="*",
            metavar="key=value",
            help="FlyRouteConfig overrides, e.g. theta=0.6",
        )
        sp.add_argument(
            "--llm",
            default="engine",
            help="'engine' (rollout_bridge in-process engine) or MODULE:FACTORY",
        )
        sp.add_argument(
            "--model",
            default=None,
            help="HF model dir or .gguf for the engine (default: the embedded SmolLM2-135M GGUF)",
        )
        sp.add_argument("--k", type=int, default=5, help="seed queries per agent (default 5)")
        sp.add_argument(
            "--test-fraction",
            type=float,
            default=0.3,
            help="held-out share of each class (default 0.3)",
        )
        sp.add_argument("--max-train-per-class", type=int, default=None, help="cap per class")
        sp.add_argument("--max-test-per-class", type=int, default=None, help="cap per class")
        sp.add_argument("--split-seed", type=int, default=0, help="benchmark shuffling seed")
        sp.add_argument(
            "--eval-batch-size", type=int, default=16, help="router prompts per LLM call"
        )
        sp.add_argument("--no-progress", action="store_true", help="no progress bars")

    r = sub.add_parser("replay", help="replay a training stream with checkpoints and evaluation")
    common(r)
    g = r.add_mutually_exclusive_group()
    g.add_argument("--checkpoints", default=None, help="comma-separated step counts, e.g. 0,50,100")
    g.add_argument(
        "--checkpoint-every", type=int, default=None, help="evaluate every N replayed queries"
    )
    r.add_argument(
        "--gate",
        choices=("judge", "verifier"),
        default="judge",
        help="quality gate (default judge)",
    )
    r.add_argument(
        "--no-baselines", action="store_true", help="skip the seed-description router baseline"
    )
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results, profiles and report of an output directory that holds a "
        "results.json (without it, such a directory is refused)",
    )
    r.set_defaults(func=_cmd_replay)

    e = sub.add_parser("eval", help="evaluate saved profiles on the test split")
    common(e)
    e.add_argument("--profiles", required=True, help="profile file (a checkpoint or journal)")
    e.set_defaults(func=_cmd_eval)

    rep = sub.add_parser("report", help="re-render the report of a results.json")
    rep.add_argument("results", help="path of results.json")
    rep.set_defaults(func=_cmd_report)

    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _config(args: argparse.Namespace) -> Any:
    """The FlyRouteConfig of ``--config`` (a path or a bundled name) with the positional
    ``key=value`` overrides and those of ``--set``."""
    from coevo_jax._config import ConfigError, load_data, load_yaml
    from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig

    overrides = [*args.key_values, *args.set]
    try:
        if args.config:
            return load_yaml(FlyRouteConfig, args.config, overrides)
        return load_data(FlyRouteConfig, {}, "FlyRouteConfig defaults", overrides)
    except ConfigError as e:
        raise SystemExit(f"coevo flyroute: {e}") from e


def engine_llm(
    model: str | None, agents: list[str], *, max_prompt_tokens: int | None = None
) -> Any:
    """``rollout_bridge.text.EngineTextLLM`` over the in-process JAX engine
    (:func:`coevo_jax.orchestrators.engine_llm.engine_text_llm`).

    Every agent name maps to the bare backbone (engine agent -1): the benchmark's experts
    share one model and differ in their prompts and sampling seeds until adapters are
    published. Prompt budgets follow the model's context length (``max_prompt_tokens``: an
    extra cap).
    """
    from coevo_jax.orchestrators.engine_llm import engine_text_llm

    return engine_text_llm(
        prog="coevo flyroute",
        engine="inprocess",
        model=model,
        agent_ids=dict.fromkeys(agents, -1),
        max_prompt_tokens=max_prompt_tokens,
    )


def make_llm(spec: str, *, model: str | None, agents: list[str]) -> Any:
    """Builds the TextLLM named by ``spec`` ('engine' or 'MODULE:FACTORY')."""
    if spec == "engine":
        return engine_llm(model, agents)
    if ":" not in spec:
        raise SystemExit(f"coevo flyroute: --llm must be 'engine' or MODULE:FACTORY, got {spec!r}")
    mod, attr = spec.split(":", 1)
    try:
        factory = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"coevo flyroute: cannot load LLM factory {spec!r}: {e}") from e
    return factory(model=model, agents=agents)


def _benchmark(args: argparse.Namespace) -> Any:
    from coevo_jax.orchestrators.flyroute.bench_data import (
        DEFAULT_OFFLINE_SOURCES,
        BenchmarkDataError,
        build_benchmark,
        load_records_jsonl,
        offline_records,
    )

    try:
        if args.records:
            records = load_records_jsonl(args.records)
        else:
            names = args.offline.split(",") if args.offline else DEFAULT_OFFLINE_SOURCES
            records = offline_records([n.strip() for n in names if n.strip()])
        return build_benchmark(
            records,
            k=args.k,
            test_fraction=args.test_fraction,
            max_train_per_class=args.max_train_per_class,
            max_test_per_class=args.max_test_per_class,
            seed=args.split_seed,
        )
    except BenchmarkDataError as e:
        raise SystemExit(f"coevo flyroute: {e}") from e


def _print_summary(results: dict[str, Any]) -> None:
    from coevo_jax.orchestrators.flyroute.report import accuracy_table

    print(accuracy_table(results))


def _cmd_replay(args: argparse.Namespace) -> int:
    from coevo_jax.orchestrators.flyroute.gate import JudgeGate, VerifierGate, verifier_from_records
    from coevo_jax.orchestrators.flyroute.pipeline import FlyRoute
    from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
    from coevo_jax.orchestrators.flyroute.replay import replay, seed_only_router
    from coevo_jax.orchestrators.flyroute.report import write_report

    cfg = _config(args)
    bench = _benchmark(args)
    out = Path(args.out)
    if (out / "results.json").exists() and not args.overwrite:
        raise SystemExit(
            f"coevo flyroute: {out}/results.json exists; pass --overwrite or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "profiles.journal.jsonl"
    journal.unlink(missing_ok=True)
    store = bench.register(ProfileStore(min_seed_queries=cfg.min_seed_queries, journal=journal))
    llm = make_llm(args.llm, model=args.model, agents=store.names)
    judge = JudgeGate(
        llm,
        theta=cfg.theta,
        max_tokens=cfg.judge_max_tokens,
        response_chars=cfg.judge_response_chars,
        seed=cfg.seed,
    )
    gate = judge
    if args.gate == "verifier":
        try:
            gate = VerifierGate(
                verifier_from_records(bench.records), theta=cfg.theta, fallback=judge
            )
        except ImportError as e:
            raise SystemExit(f"coevo flyroute: {e}") from e
    pipe = FlyRoute.from_llm(store, llm, cfg, gate=gate, agent_templates=bench.agent_templates)
    n = len(bench.train)
    if args.checkpoints:
        try:
            cps = [int(x) for x in args.checkpoints.split(",") if x.strip()]
        except ValueError as e:
            raise SystemExit(
                f"coevo flyroute: --checkpoints must be integers: {args.checkpoints!r}"
            ) from e
    else:
        every = args.checkpoint_every or max(1, n // 4)
        cps = list(range(0, n + 1, every))
    if n not in cps:
        cps.append(n)
    baselines = (
        {} if args.no_baselines else {"LLM router (seed descriptions)": seed_only_router(llm, cfg)}
    )
    results = replay(
        pipe,
        bench.train,
        bench.test,
        checkpoints=cps,
        out_dir=out,
        baselines=baselines,
        eval_batch_size=args.eval_batch_size,
        progress=not args.no_progress,
        manifest=bench.manifest,
    )
    store.close()
    paths = write_report(results, out)
    _print_summary(results)
    print(f"report: {paths['report']}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from coevo_jax.orchestrators.flyroute.exploit import Router
    from coevo_jax.orchestrators.flyroute.profiles import ProfileFileError, ProfileStore
    from coevo_jax.orchestrators.flyroute.replay import evaluate

    cfg = _config(args)
    bench = _benchmark(args)
    try:
        store = ProfileStore.load(args.profiles, min_seed_queries=cfg.min_seed_queries)
    except ProfileFileError as e:
        raise SystemExit(f"coevo flyroute: {e}") from e
    missing = sorted({it.gold for it in bench.test} - set(store.names))
    if missing:
        print(
            f"warning: the profiles lack agent(s) {missing}; their queries cannot be routed right",
            file=sys.stderr,
        )
    llm = make_llm(args.llm, model=args.model, agents=store.names)
    r = evaluate(
        Router(llm, cfg),
        store,
        list(bench.test),
        batch_size=args.eval_batch_size,
        progress=not args.no_progress,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"profiles": str(args.profiles), **r.summary(), "predictions": r.predictions}
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    print(
        f"accuracy {100 * r.accuracy:.1f}% on {r.n} queries; per domain: "
        + ", ".join(f"{d} {100 * a:.1f}%" for d, a in r.per_domain.items())
    )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from coevo_jax.orchestrators.flyroute.report import write_report

    try:
        paths = write_report(args.results)
    except (FileNotFoundError, json.JSONDecodeError) as e:
        raise SystemExit(f"coevo flyroute: {e}") from e
    print(f"report: {paths['report']}")
    return 0
