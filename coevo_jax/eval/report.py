"""Evaluation reports: JSON, markdown tables, and plots (accuracy per method and per dataset
with 95% intervals; tokens vs accuracy across tau values).

:data:`METRICS` names the metric of every field a report holds; :func:`readme_table` renders
the README's result table from a report JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAIN_METHODS = ("cera", "base", "uniform_vote", "random", "top:1", "top:2", "oracle")

METRICS = {
    "accuracy": "partial credit: mean over queries of the output's verifier score (code: "
    "fraction of tests passed; IFEval: fraction of instructions followed, strict checking; "
    "math, reasoning: 0/1)",
    "strict": "all-or-nothing: a query counts only if its verifier score is 1 (code: pass@1 "
    "on all tests; IFEval: prompt-level strict, every instruction followed)",
    "macro": "unweighted mean over datasets of each dataset's partial-credit accuracy",
    "macro_strict": "unweighted mean over datasets of each dataset's strict accuracy",
    "by_dataset": "partial-credit accuracy of each dataset (strict_by_dataset: strict)",
    "*_ci": "95% percentile bootstrap interval: queries resampled; macro: resampled within "
    "each dataset",
    "tokens_per_query": "tokens generated per query, summed over the activated agents "
    "(base: the base model's completion)",
    "agents_per_query": "agents activated per query (base: 1)",
    "comparisons.<baseline>.<metric>.diff": "CERA-MoA minus the baseline on the same queries "
    "(macro_diff: macro over datasets), with a paired bootstrap interval",
    "comparisons.<baseline>.<metric>.p_value": "two-sided paired test of equal scores: exact "
    "McNemar when both methods score 0/1, else a sign-flip permutation test",
    "comparisons.<baseline>.<metric>.p_holm": "p_value Holm-adjusted over all baselines "
    "compared on that metric",
}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _pct_ci(x: float, ci: list[float] | None) -> str:
    """``41.2 [36.0, 46.5]`` (percent); the point alone when there is no interval."""
    if ci is None:
        return _pct(x)
    return f"{_pct(x)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _diff_ci(x: float, ci: list[float]) -> str:
    return f"{100 * x:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def markdown_table(
    results: dict[str, dict[str, Any]],
    router_ms: float | None = None,
    comparisons: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Methods as rows: partial-credit and strict accuracy (query-weighted and macro, with
    95% bootstrap intervals when the entries hold them), per-dataset accuracy, tokens and
    agents per query, and, given ``comparisons``, CERA-MoA minus the method with its paired
    interval and Holm-adjusted p-value; a legend under the table names every column's metric.
    """
    datasets = sorted({d for r in results.values() for d in r["by_dataset"]})
    head = ["method", "accuracy", "strict", "macro", "macro strict", *datasets]
    head += ["tokens/query", "agents/query"]
    if comparisons:
        head += ["Δ accuracy", "p", "Δ strict", "p strict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in results.items():
        cells = [name, _pct_ci(r["accuracy"], r.get("accuracy_ci"))]
        for key in ("strict", "macro", "macro_strict"):
            cells.append(_pct_ci(r[key], r.get(f"{key}_ci")) if key in r else "")
        cells += [_pct(r["by_dataset"][d]) if d in r["by_dataset"] else "" for d in datasets]
        cells += [f"{r['tokens_per_query']:.1f}", f"{r['agents_per_query']:.2f}"]
        if comparisons:
            cmp = comparisons.get(name)
            for metric in ("accuracy", "strict"):
                if cmp is None:
                    cells += ["", ""]
                else:
                    m = cmp[metric]
                    cells += [_diff_ci(m["diff"], m["diff_ci"]), _p(m["p_holm"])]
        lines.append("| " + " | ".join(cells) + " |")
    legend = [
        "accuracy: " + METRICS["accuracy"],
        "strict: " + METRICS["strict"],
        "macro / macro strict: unweighted mean over datasets of the per-dataset accuracy / "
        "strict accuracy",
        f"{', '.join(datasets)}: partial-credit accuracy of that dataset",
        "[lo, hi]: 95% percentile bootstrap interval (macro: resampled within each dataset); "
        "all accuracies in %",
        "tokens/query: " + METRICS["tokens_per_query"],
        "agents/query: " + METRICS["agents_per_query"],
    ]
    if comparisons:
        legend += [
            "Δ accuracy / Δ strict: CERA-MoA minus the method, percentage points, with a paired "
            "bootstrap interval",
            "p / p strict: "
            + METRICS["comparisons.<baseline>.<metric>.p_value"]
            + ", Holm-adjusted over the methods compared",
        ]
    lines += [""] + [f"- {x}" for x in legend]
    if router_ms is not None:
        lines.append("")
        lines.append(f"Router latency: {router_ms:.2f} ms per query (batch 1, features + heads).")
    return "\n".join(lines) + "\n"


def readme_methods(results: dict[str, Any]) -> list[str]:
    """The methods a summary table shows, in reading order: CERA-MoA, base, each single
    agent, uniform vote, random, top-1/2/3, oracle (those present in ``results``)."""
    singles = sorted((k for k in results if k.startswith("single:")), key=lambda k: int(k[7:]))
    order = ["cera", "base", *singles, "uniform_vote", "random", "top:1", "top:2", "top:3"]
    return [k for k in [*order, "oracle"] if k in results]


def readme_table(report: dict[str, Any] | str | os.PathLike) -> str:
    """The README's result table, rendered from a report (its JSON payload or the file path).

    One row per method of :func:`readme_methods`: partial-credit, strict and macro accuracy
    with 95% bootstrap intervals, tokens and agents per query, and CERA-MoA minus the method
    in macro accuracy (paired interval, stratified by dataset) with the Holm-adjusted p-value
    of the paired test on per-query accuracy. The output is a deterministic function of the
    report, so a test can compare a README section against the committed JSON.
    """
    if not isinstance(report, dict):
        report = json.loads(Path(report).read_text())
    results, comparisons = report["results"], report.get("comparisons") or {}
    head = [
        "method",
        "accuracy % [95% CI]",
        "strict % [95% CI]",
        "macro % [95% CI]",
        "tokens/query",
        "agents/query",
        "CERA-MoA − method, macro pp [95% CI]",
        "p (paired, Holm)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in readme_methods(results):
        r = results[name]
        label = "CERA-MoA" if name == "cera" else name
        cells = [
            label,
            _pct_ci(r["accuracy"], r["accuracy_ci"]),
            _pct_ci(r["strict"], r["strict_ci"]),
            _pct_ci(r["macro"], r["macro_ci"]),
            f"{r['tokens_per_query']:.1f}",
            f"{r['agents_per_query']:.2f}",
        ]
        cmp = comparisons.get(name, {}).get("accuracy")
        if cmp is None:
            cells += ["-", "-"]
        else:
            cells += [_diff_ci(cmp["macro_diff"], cmp["macro_diff_ci"]), _p(cmp["p_holm"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | os.PathLike, name: str, payload: dict[str, Any]) -> list[Path]:
    """Writes ``{name}.json``, ``{name}.md`` and three plots into ``out_dir``: accuracy per
    dataset, tokens vs accuracy across tau values, and every method's accuracy (partial
    credit, strict, macro) with its 95% interval."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = payload["results"]
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(payload, indent=2))
    md = f"# Evaluation: {name}\n\n{payload.get('description', '')}\n\n"
    router = payload.get("router")
    if router:
        md += "Router: " + ", ".join(f"{k}={v}" for k, v in router.items()) + "\n\n"
    if payload.get("queries_by_dataset"):
        counts = ", ".join(f"{k}: {v}" for k, v in payload["queries_by_dataset"].items())
        md += f"Queries per dataset: {counts}\n\n"
    if "max_new_tokens" in payload:
        source = payload.get("max_new_tokens_source", "")
        md += f"Token budget: {payload['max_new_tokens']} new tokens" + (
            f" ({source})\n\n" if source else "\n\n"
        )
    md += markdown_table(results, payload.get("router_ms"), payload.get("comparisons"))
    md += f"\n![accuracy per method]({name}_methods.png)\n"
    md += f"\n![accuracy per dataset]({name}_accuracy.png)\n"
    md += f"\n![tokens vs accuracy]({name}_tokens_vs_accuracy.png)\n"
    paths[1].write_text(md)
    paths.append(_methods(results, out / f"{name}_methods.png"))
    paths.append(_bar(results, out / f"{name}_accuracy.png"))
    sweep = {k: v for k, v in results.items() if k.startswith("cera@")}
    paths.append(_tradeoff(results, sweep, out / f"{name}_tokens_vs_accuracy.png"))
    return paths


def _bar(results: dict[str, dict[str, Any]], path: Path) -> Path:
    methods = [m for m in MAIN_METHODS if m in results] or list(results)[:6]
    datasets = sorted({d for m in methods for d in results[m]["by_dataset"]})
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(datasets) + 3), 4))
    for k, m in enumerate(methods):
        ys = [100 * results[m]["by_dataset"].get(d, 0.0) for d in datasets]
        cis = results[m].get("by_dataset_ci", {})
        err = None
        if all(d in cis for d in datasets):
            err = [
                [y - 100 * cis[d][0] for y, d in zip(ys, datasets, strict=True)],
                [100 * cis[d][1] - y for y, d in zip(ys, datasets, strict=True)],
            ]
        xs = [i + k * width for i in range(len(datasets))]
        ax.bar(xs, ys, width, yerr=err, capsize=2, error_kw={"lw": 0.8}, label=m)
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(datasets))], datasets, rotation=20, ha="right"
    )
    ax.set(ylabel="accuracy (%, partial credit)", title="Accuracy per dataset (95% CI)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tradeoff(
    results: dict[str, dict[str, Any]], sweep: dict[str, dict[str, Any]], path: Path
) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = sorted(
        (v["tokens_per_query"], 100 * v["accuracy"], k.split("@")[1]) for k, v in sweep.items()
    )
    if pts:  # a fixed top-k router has no tau to sweep; its point is "cera" below
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="CERA-MoA (tau sweep)")
    for x, y, t in pts:
        ax.annotate(f"tau={t}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for m in ("cera", "top:1", "top:2", "top:3", "uniform_vote", "random", "base", "oracle"):
        if m in results:
            r = results[m]
            y = 100 * r["accuracy"]
            err = None
            if "accuracy_ci" in r:
                err = [[y - 100 * r["accuracy_ci"][0]], [100 * r["accuracy_ci"][1] - y]]
            ax.errorbar(
                r["tokens_per_query"],
                y,
                yerr=err,
                fmt="*" if m == "cera" else "s",
                ms=11 if m == "cera" else 6,
                capsize=3,
                label="run" if m == "cera" else m,
            )
    ax.set(
        xlabel="generated tokens per query",
        ylabel="accuracy (%, partial credit; 95% CI)",
        title="Cost vs accuracy",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _methods(results: dict[str, dict[str, Any]], path: Path) -> Path:
    """Every method's partial-credit, strict and macro accuracy with 95% interval bars."""
    methods = readme_methods(results) + sorted(k for k in results if k.startswith("cera@"))
    metrics = [m for m in ("accuracy", "strict", "macro") if all(m in results[k] for k in methods)]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(methods) * max(1, len(metrics)) / 2 + 1.5))
    height = 0.8 / max(1, len(metrics))
    for j, metric in enumerate(metrics):
        xs = [100 * results[k][metric] for k in methods]
        err = None
        if all(f"{metric}_ci" in results[k] for k in methods):
            err = [
                [x - 100 * results[k][f"{metric}_ci"][0] for x, k in zip(xs, methods, strict=True)],
                [100 * results[k][f"{metric}_ci"][1] - x for x, k in zip(xs, methods, strict=True)],
            ]
        ys = [i + j * height for i in range(len(methods))]
        ax.barh(ys, xs, height, xerr=err, capsize=2, error_kw={"lw": 0.8}, label=metric)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(methods))], methods)
    ax.invert_yaxis()
    ax.set(xlabel="accuracy (%), 95% bootstrap CI", title="Accuracy per method")
    ax.legend(fontsize=7, title="metric", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare_table(runs: dict[str, dict[str, Any]]) -> str:
    """Paper-style table: one row per run (its router variant named), the run's routed
    accuracy per dataset, the average (with its 95% interval where the report has one), the
    macro and strict accuracies, tokens and activated agents per query."""
    datasets = sorted({d for p in runs.values() for d in p["results"]["cera"]["by_dataset"]})
    head = ["run", "router", *datasets, "avg", "macro", "strict", "tokens/query", "agents/query"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, p in runs.items():
        r = p["results"]["cera"]
        cells = [name, p.get("router", {}).get("ablation", "?")]
        cells += [
            f"{100 * r['by_dataset'][d]:.1f}" if d in r["by_dataset"] else "-" for d in datasets
        ]
        cells += [
            _pct_ci(r["accuracy"], r.get("accuracy_ci")),
            _pct_ci(r["macro"], r.get("macro_ci")) if "macro" in r else "-",
            _pct_ci(r["strict"], r.get("strict_ci")) if "strict" in r else "-",
            f"{r['tokens_per_query']:.1f}",
            f"{r['agents_per_query']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
