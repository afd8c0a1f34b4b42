"""Evaluation reports: JSON, a markdown table, and plots (accuracy per dataset; tokens vs
accuracy across tau values)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAIN_METHODS = ("cera", "base", "uniform_vote", "random", "top:1", "top:2", "oracle")


def markdown_table(results: dict[str, dict[str, Any]], router_ms: float | None = None) -> str:
    """Methods as rows; overall accuracy, per-dataset accuracy, tokens and agents per query."""
    datasets = sorted({d for r in results.values() for d in r["by_dataset"]})
    head = ["method", "accuracy", *datasets, "tokens/query", "agents/query"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in results.items():
        cells = [name, f"{100 * r['accuracy']:.1f}"]
        cells += [
            f"{100 * r['by_dataset'][d]:.1f}" if d in r["by_dataset"] else "" for d in datasets
        ]
        cells += [f"{r['tokens_per_query']:.1f}", f"{r['agents_per_query']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    if router_ms is not None:
        lines.append("")
        lines.append(f"Router latency: {router_ms:.2f} ms per query (batch 1, features + heads).")
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | os.PathLike, name: str, payload: dict[str, Any]) -> list[Path]:
    """Writes ``{name}.json``, ``{name}.md`` and the two plots into ``out_dir``."""
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
    md += markdown_table(results, payload.get("router_ms"))
    md += f"\n![accuracy per dataset]({name}_accuracy.png)\n"
    md += f"\n![tokens vs accuracy]({name}_tokens_vs_accuracy.png)\n"
    paths[1].write_text(md)
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
        ax.bar([i + k * width for i in range(len(datasets))], ys, width, label=m)
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(datasets))], datasets, rotation=20, ha="right"
    )
    ax.set(ylabel="accuracy (%)", title="Accuracy per dataset")
    ax.legend(fontsize=7, ncol=2)
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
    if "cera" in results:
        r = results["cera"]
        ax.scatter(r["tokens_per_query"], 100 * r["accuracy"], marker="*", s=120, label="run")
    for m in ("top:1", "top:2", "top:3", "uniform_vote", "random", "base", "oracle"):
        if m in results:
            ax.scatter(
                results[m]["tokens_per_query"], 100 * results[m]["accuracy"], marker="s", label=m
            )
    ax.set(xlabel="generated tokens per query", ylabel="accuracy (%)", title="Cost vs accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare_table(runs: dict[str, dict[str, Any]]) -> str:
    """Paper-style table: one row per run (its router variant named), the run's routed
    accuracy per dataset, the average, tokens and activated agents per query."""
    datasets = sorted({d for p in runs.values() for d in p["results"]["cera"]["by_dataset"]})
    head = ["run", "router", *datasets, "avg", "tokens/query", "agents/query"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, p in runs.items():
        r = p["results"]["cera"]
        cells = [name, p.get("router", {}).get("ablation", "?")]
        cells += [
            f"{100 * r['by_dataset'][d]:.1f}" if d in r["by_dataset"] else "-" for d in datasets
        ]
        cells += [
            f"{100 * r['accuracy']:.1f}",
            f"{r['tokens_per_query']:.1f}",
            f"{r['agents_per_query']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
