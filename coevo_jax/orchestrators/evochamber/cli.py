"""``coevo evochamber``: run EvoChamber over a task stream and write its report.

    coevo evochamber --stream aflow --data data/offline --engine inprocess --model PATH \\
        --tasks 20 --out runs/evo [--baselines] [--config cfg.yaml] [alpha=0.2 ...]
        [--no-selector] [--shuffle SEED]

Overrides of EvoChamberConfig are positional ``key=value``, as for ``coevo train``;
``--set key=value`` is the same.

The LLM is ``rollout_bridge.text.EngineTextLLM`` over the in-process JAX engine (``--model``,
default: the project's default model) or ``rollout_bridge.http_engine.HTTPEngine`` (``--url``,
``--served-model-name``), with
every agent served by the shared backbone. Rewards come from ``coevo_jax.rewards.score``.

The functions below import the engine and the EvoChamber modules when they run: ``coevo``
imports every subcommand's CLI module to build its parser, and should not load them all.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rollout_bridge.engines import engine_arg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "evochamber", help="test-time co-evolution of an agent pool over a task stream"
    )
    p.add_argument(
        "--stream",
        required=True,
        choices=("hard_math", "hard_code", "aflow"),
        help="the task stream (streams.py): hard math, hard code, or the AFlow mixture",
    )
    p.add_argument(
        "--data",
        default=None,
        help="directory of source JSONL files (aime, codecontests, hotpotqa, drop, or overrides); "
        "sources without a file come from the offline builders (see streams.py)",
    )
    p.add_argument(
        "--engine",
        default="inprocess",
        type=engine_arg,
        help="inprocess (the JAX engine in this process; default) or http (a running server)",
    )
    p.add_argument("--url", default=None, help="server URL for --engine http")
    p.add_argument(
        "--model", default=None, help="model path (weights + tokenizer); default: SmolLM2-135M"
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="--engine http: the name the server's base model answers to",
    )
    p.add_argument(
        "--tasks", type=int, default=None, help="about this many tasks, every niche kept"
    )
    p.add_argument(
        "--out", required=True, help="output directory (events, transcript, report, PNGs)"
    )
    p.add_argument(
        "--config", default=None, help="EvoChamberConfig YAML: a path or a bundled config's name"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override (repeatable); the same as a positional key=value",
    )
    p.add_argument(
        "key_values",
        nargs="*",
        metavar="key=value",
        help="EvoChamberConfig overrides, e.g. alpha=0.2",
    )
    p.add_argument(
        "--embedder",
        default="auto",
        choices=("auto", "minilm", "hash"),
        help="task embedder: minilm (a sentence encoder), hash (no model), or auto (minilm "
        "when its package is installed, else hash; default)",
    )
    p.add_argument("--baselines", action="store_true", help="also run single-agent and SC@5")
    p.add_argument("--seed", type=int, default=None, help="overrides the config's seed")
    p.add_argument(
        "--no-selector",
        action="store_true",
        help="ablation: random teams of the same size instead of anchor/complement/scout "
        "(sets team_selector=random)",
    )
    p.add_argument(
        "--shuffle",
        type=int,
        default=None,
        metavar="SEED",
        help="robustness: run the same tasks in a random order drawn with SEED",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


class SharedBackbone:
    """Routes every agent to the engine's base model (agent -1).

    EvoChamber's agents are identically initialised and differ only in persona and
    experience (their prompts), and the pool grows by fork and genesis, so agent names are not
    engine adapter slots."""

    def __init__(self, llm):
        self.llm = llm

    def complete(self, requests):
        import dataclasses

        return self.llm.complete([dataclasses.replace(r, agent=-1) for r in requests])

    def __getattr__(self, name):
        # token counting and prompt budgets of the wrapped LLM, when it has them
        if name in ("count_tokens", "prompt_budget", "context_length"):
            return getattr(self.llm, name)
        raise AttributeError(name)


def make_llm(
    engine: str, url: str | None, model: str | None, seed: int, served_model_name: str | None = None
):
    """A TextLLM over the rollout bridge (:func:`coevo_jax.orchestrators.engine_llm.engine_text_llm`):
    the in-process JAX engine, or an HTTP server (vLLM or ``coevo serve``) whose base model
    answers to ``served_model_name``, for which only the tokenizer and config of ``model`` are
    read (default: the project's default model). Every agent is served by the base model."""
    from coevo_jax.orchestrators.engine_llm import engine_text_llm

    return SharedBackbone(
        engine_text_llm(
            prog="coevo evochamber",
            engine=engine,
            model=model,
            url=url,
            served_model_name=served_model_name,
        )
    )


def main(args: argparse.Namespace) -> int:
    from coevo_jax._config import load_data, load_yaml
    from coevo_jax.orchestrators.evochamber import baselines as bl
    from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
    from coevo_jax.orchestrators.evochamber.embed import make_embedder
    from coevo_jax.orchestrators.evochamber.loop import Runtime, default_reward_fn, run_stream
    from coevo_jax.orchestrators.evochamber.report import write_report
    from coevo_jax.orchestrators.evochamber.streams import build_stream, shuffle_stream

    overrides = [*args.key_values, *args.overrides]
    overrides += [f"seed={args.seed}"] if args.seed is not None else []
    if args.no_selector:
        overrides.append("team_selector=random")
    if args.config:
        cfg = load_yaml(EvoChamberConfig, args.config, overrides)
    else:
        cfg = load_data(EvoChamberConfig, {}, "EvoChamberConfig defaults", overrides)
    records = build_stream(args.stream, args.data, limit=args.tasks, seed=cfg.seed)
    if args.shuffle is not None:
        records = shuffle_stream(records, args.shuffle)
    llm = make_llm(args.engine, args.url, args.model, cfg.seed, args.served_model_name)
    reward_fn = default_reward_fn()
    rt = Runtime(llm, reward_fn, make_embedder(args.embedder, cfg.embed_dim), cfg)
    out = Path(args.out)
    result = run_stream(records, rt, out_dir=out, progress=not args.no_progress)
    base = {}
    if args.baselines:
        base["single_agent"] = bl.single_agent(
            records, llm, reward_fn, cfg, progress=not args.no_progress
        )
        base["sc@5"] = bl.self_consistency(
            records, llm, reward_fn, cfg, k=5, progress=not args.no_progress
        )
    s = write_report(result.events, cfg, out, baselines=base, counters=result.state.counters)
    print(
        json.dumps(
            {
                "tasks": s["tasks"],
                "accuracy": s["accuracy"],
                "accuracy_per_niche": s["accuracy_per_niche"],
                "metric_per_niche": s["metric_per_niche"],
                "partial_credit_per_niche": s["partial_credit_per_niche"],
                "team_selector": cfg.team_selector,
                "shuffle": args.shuffle,
                **{f"{k}_accuracy": v["accuracy"] for k, v in base.items()},
                "out": str(out),
            },
            indent=2,
        )
    )
    print((out / "report.md").read_text(), file=sys.stderr)
    return 0
