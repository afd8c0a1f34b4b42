"""Evaluating a training run: restore it read-only, collect one generation pass, compute every
method, write the report under ``RUN/eval/``.

Evaluating never changes a run: the run's ``coevo_jax.train.system.System`` is restored from
its checkpoint (a System writes nothing into a run directory) and, for an ``http`` or
``vllm`` engine, adapters are published to a temporary directory rather than
``RUN/adapters``.
Ablation routers (``router.head``, ``router.feature_layers``, ``router.routing``, no
exploration, no margin, a train/test tau mismatch) are evaluated by the same path: the
restored router scores queries with its own head and features, the ``cera`` entry uses the
run's own routing rule, and the report names the ablation (:func:`ablation_name`).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from coevo_jax._config import from_dict, read_saved_config
from coevo_jax._errors import UserError
from coevo_jax.data import read_records
from coevo_jax.eval import stats
from coevo_jax.eval.collect import collect
from coevo_jax.eval.methods import compare_to_reference, method_outcomes, sources, summarise
from coevo_jax.eval.report import METRICS, write_report
from coevo_jax.train.checkpoint import latest_checkpoint
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.system import System
from rollout_bridge.engines import engine_spec

SUITES = {"cpu": ("eval_id", "eval_ood"), "id": ("eval_id",), "ood": ("eval_ood",)}
ALL_BASELINES = ("base", "single", "uniform_vote", "random", "top", "oracle")


class SuiteError(UserError, ValueError):
    """An evaluation suite that names neither a known split set nor a records file, or one
    with no records: the user's ``--suite``, not a bug."""


def check_suite(suite: str) -> None:
    """Raises :class:`SuiteError` unless ``suite`` is a named suite or an existing file, so a
    typo stops the evaluation before it loads the run's models."""
    if suite not in SUITES and not Path(suite).is_file():
        raise SuiteError(
            f"unknown suite {suite!r}: use {', '.join(SUITES)} or the path of a JSONL file "
            "of records"
        )


def _per_dataset(recs: list[Any], limit: int | None) -> list[Any]:
    """The first ``limit`` records of each source, in file order (all when ``limit`` is None)."""
    if not limit:
        return list(recs)
    seen: dict[str, int] = defaultdict(int)
    out = []
    for r in recs:
        src = r.source if hasattr(r, "source") else r.get("source", "unknown")
        if seen[src] < limit:
            seen[src] += 1
            out.append(r)
    return out


def suite_records(data_dir: Path, suite: str, limit: int | None = None) -> list[Any]:
    """Records of ``suite`` (``cpu``, ``id``, ``ood`` or a JSONL file of records).

    The named suites read the held-out files of a built mixture directory (``coevo data
    build``): ``eval_id.jsonl`` and/or ``eval_ood.jsonl``. ``limit`` keeps the first
    ``limit`` records of each dataset (source), so a short evaluation still covers every one.
    """
    check_suite(suite)
    if suite not in SUITES:
        return _per_dataset(read_records(Path(suite)), limit)
    out = []
    for split in SUITES[suite]:
        f = Path(data_dir) / f"{split}.jsonl"
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing; build the mixture with `coevo data build`")
        out += _per_dataset(read_records(f), limit)
    if not out:
        raise SuiteError(f"suite {suite!r} under {data_dir}: no records")
    return out


def ablation_name(router_cfg: Any, eval_tau: float | None = None) -> str:
    """A short name for the router variant a run was trained with (``"full"`` for CERA-MoA).

    Parts, joined with ``+``: ``regression-head`` / ``classification-head``, ``final-layer``,
    ``top-{k}``, ``no-exploration``, ``no-margin``, ``tau-mismatch`` (``eval_tau`` differs
    from the training ``tau``).
    """
    parts = []
    if router_cfg.head != "familiarity":
        parts.append(f"{router_cfg.head}-head")
    if router_cfg.feature_layers != "mid":
        parts.append(f"{router_cfg.feature_layers}-layer")
    if router_cfg.routing == "top_k":
        parts.append(f"top-{router_cfg.top_k}")
    if not router_cfg.explores:
        parts.append("no-exploration")
    if router_cfg.unbounded_push:
        parts.append("no-margin")
    if eval_tau is not None and router_cfg.routing == "threshold" and eval_tau != router_cfg.tau:
        parts.append("tau-mismatch")
    return "+".join(parts) or "full"


def router_summary(router_cfg: Any, eval_tau: float) -> dict[str, Any]:
    """The router settings a report must show to be read (and compared) correctly."""
    keys = ("head", "feature_layers", "routing", "top_k", "lam", "margin", "tau")
    out = {k: getattr(router_cfg, k) for k in keys}
    out.update(
        exploration=bool(router_cfg.explores),
        unbounded_push=bool(router_cfg.unbounded_push),
        eval_tau=eval_tau,
        ablation=ablation_name(router_cfg, eval_tau),
    )
    return out


def evaluate_system(
    system: Any,
    records: list[Any],
    out_dir: Path,
    *,
    name: str,
    tau: float | None = None,
    taus: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9),
    max_new_tokens: int | None = None,
    baselines: tuple[str, ...] = ALL_BASELINES,
    score_fn=None,
    extra: dict[str, Any] | None = None,
    progress: bool = False,
    seed: int = 0,
    n_resamples: int = stats.N_RESAMPLES,
) -> dict[str, Any]:
    """Runs the collection pass and every method; writes the report; returns the payload.

    Args:
      system: a restored ``coevo_jax.train.system.System`` (or a trainer's ``system``).
      records: evaluation records.
      out_dir: where ``{name}.json``, ``{name}.md`` and the plots go.
      tau: inference threshold (default: the run's ``eval_tau``).
      taus: threshold sweep for the tokens-vs-accuracy plot (threshold routers only).
      max_new_tokens: generation budget (default: the run's ``rollout.max_new_tokens``, so a
        run is evaluated at the budget it was trained with).
      baselines: which baselines to compute (see ``coevo_jax.eval.methods``).
      score_fn: ``(records, completions) -> scores`` (default: the verifiers).
      extra: more fields for the JSON payload (run directory, suite...).
      progress: a progress bar over the generation.
      seed: seed of the random baseline, the bootstrap and the permutation tests.
      n_resamples: bootstrap replicates per interval.

    The payload's ``results`` hold one :func:`coevo_jax.eval.methods.summarise` entry per
    method, ``comparisons`` CERA-MoA against each baseline
    (:func:`coevo_jax.eval.methods.compare_to_reference`), ``metrics`` what every field means.
    """
    rcfg = system.cfg.router
    budget_source = "argument"
    if max_new_tokens is None:
        max_new_tokens, budget_source = system.cfg.rollout.max_new_tokens, "rollout.max_new_tokens"

    tau = system.cfg.eval_tau if tau is None else tau
    t0 = time.perf_counter()
    c = collect(
        system, records, max_new_tokens=max_new_tokens, score_fn=score_fn, progress=progress
    )
    outcomes = method_outcomes(
        c,
        tau=tau,
        taus=taus,
        baselines=baselines,
        seed=seed,
        routing=rcfg.routing,
        top_k=rcfg.top_k,
    )
    src = sources(c)
    boot = dict(seed=seed, n_resamples=n_resamples)
    results = {k: summarise(o, src, **boot) for k, o in outcomes.items()}
    comparisons = compare_to_reference(outcomes, src, **boot) if len(outcomes) > 1 else {}
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        counts[r.source if hasattr(r, "source") else r.get("source", "unknown")] += 1
    router = router_summary(rcfg, tau)
    rule = f"top-{rcfg.top_k}" if rcfg.routing == "top_k" else f"tau={tau:g}"
    payload = {
        "description": f"{len(records)} queries, router {router['ablation']} ({rule}), greedy, "
        f"max_new_tokens={max_new_tokens} ({budget_source})",
        "tau": tau,
        "queries": len(records),
        "queries_by_dataset": dict(sorted(counts.items())),
        "max_new_tokens": max_new_tokens,
        "max_new_tokens_source": budget_source,
        "bootstrap": {
            "method": "percentile",
            "confidence": stats.CONFIDENCE,
            "n_resamples": n_resamples,
            "seed": seed,
        },
        "metrics": METRICS,
        "router": router,
        "router_ms": c.router_ms,
        "eval_s": time.perf_counter() - t0,
        **(extra or {}),
        "results": results,
        "comparisons": comparisons,
    }
    write_report(out_dir, name, payload)
    return payload


def report_name(suite: str, router_cfg: Any, tau: float) -> str:
    """``{suite}-{ablation}-tau{tau}`` (the suite's file stem for a JSONL suite)."""
    s = suite if suite in SUITES else Path(suite).stem
    rule = f"top{router_cfg.top_k}" if router_cfg.routing == "top_k" else f"tau{tau:g}"
    return f"{s}-{ablation_name(router_cfg, tau)}-{rule}"


def evaluate_run(
    run_dir: str | Path,
    *,
    suite: str = "cpu",
    limit: int | None = None,
    tau: float | None = None,
    backbone: Any = None,
    agent_backbones: Any = None,
    progress: bool = False,
    engine: str | None = None,
    vllm_python: str | None = None,
    urls: tuple[str, ...] | None = None,
    **kw,
) -> dict[str, Any]:
    """Restores ``run_dir``'s last checkpoint read-only and evaluates it on ``suite``.

    Only ``run_dir/eval/`` is written. ``backbone`` / ``agent_backbones`` stand in for the
    config's models (tests); ``engine`` (``inprocess`` | ``http`` | ``vllm``), ``vllm_python``
    and ``urls`` replace the run's ``rollout`` settings (a ``vllm`` engine starts and stops
    its own server); ``kw`` goes to :func:`evaluate_system`.
    """
    check_suite(suite)
    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{cfg_path}: not a training run directory")
    cfg = from_dict(TrainConfig, read_saved_config(cfg_path))
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        raise FileNotFoundError(f"{run_dir / 'checkpoints'}: no checkpoint to evaluate")
    data_dir = Path(cfg.data.path) if cfg.data.path else run_dir / "data"
    records = suite_records(data_dir, suite, limit)
    tau = cfg.eval_tau if tau is None else tau
    over = {"engine": engine, "vllm_python": vllm_python, "urls": tuple(urls) if urls else None}
    over = {k: v for k, v in over.items() if v is not None}
    if over:
        cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, **over))
    with tempfile.TemporaryDirectory(prefix="coevo-eval-adapters-") as tmp:
        if engine_spec(cfg.rollout.engine).adapter_files:  # published files: not into the run
            cfg = dataclasses.replace(
                cfg, rollout=dataclasses.replace(cfg.rollout, adapter_dir=tmp)
            )
        system = System(
            cfg,
            backbone=backbone,
            agent_backbones=agent_backbones,
            engine_dir=run_dir,
            warn_dtype=False,
        )
        try:
            host = system.restore(ckpt)
            if not system.whitened and cfg.router.feature_norm != "none":
                # a checkpoint from before the whitening statistics were saved: the run took
                # them from its training queries, so take them the same way
                split = data_dir / f"{cfg.data.split}.jsonl" if data_dir.is_dir() else data_dir
                system.whiten(system.feature_sample(read_records(split)))
            extra = {"run": str(run_dir), "suite": suite, "checkpoint_round": int(host["round"])}
            return evaluate_system(
                system,
                records,
                run_dir / "eval",
                name=report_name(suite, cfg.router, tau),
                tau=tau,
                extra=extra,
                progress=progress,
                **kw,
            )
        finally:
            system.close()
