"""Replay report: accuracy table per checkpoint, accuracy-over-replay plot, store growth plot.

Reads the ``results.json`` written by :func:`.replay.replay` and writes ``report.md``,
``accuracy.png`` and ``growth.png`` beside it (matplotlib, Agg backend).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _tokens(e: dict[str, Any]) -> str:
    t, b = e.get("prompt_tokens_max"), e.get("prompt_budget")
    if t is None:
        return "-"
    return f"{t} / {b}" if b is not None else str(t)


def accuracy_table(results: dict[str, Any]) -> str:
    """A markdown table: one row per baseline and checkpoint; every column names its metric
    (routing accuracy in %, counts, router-prompt sizes)."""
    domains = sorted(
        {d for e in results["checkpoints"] for d in e["per_domain"]}
        | {d for e in results["baselines"].values() for d in e["per_domain"]}
    )
    head = [
        "router",
        "replayed queries",
        "routing acc. % (overall)",
        *(f"routing acc. % ({d})" for d in domains),
        "BM25-argmax routing acc. %",
        "unparsed replies (count)",
        "retrieved queries in prompt (mean/call)",
        "router prompt tokens (max / budget)",
    ]
    rows = [head, ["---"] * len(head)]
    for name, e in results["baselines"].items():
        rows.append(
            [
                name,
                "-",
                _pct(e["accuracy"]),
                *(_pct(e["per_domain"].get(d)) for d in domains),
                "-",
                str(e["unparsed"]),
                f"{e.get('included_mean', 0.0):.1f}",
                _tokens(e),
            ]
        )
    for e in results["checkpoints"]:
        label = "FlyRoute (cold)" if e["step"] == 0 else "FlyRoute"
        rows.append(
            [
                label,
                str(e["step"]),
                _pct(e["accuracy"]),
                *(_pct(e["per_domain"].get(d)) for d in domains),
                _pct(e.get("bm25_accuracy")),
                str(e["unparsed"]),
                f"{e.get('included_mean', 0.0):.1f}",
                _tokens(e),
            ]
        )
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def _plot_accuracy(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cps = results["checkpoints"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps = [e["step"] for e in cps]
    ax.plot(
        steps,
        [100 * e["accuracy"] for e in cps],
        "o-",
        lw=2.2,
        color="black",
        label="FlyRoute (overall)",
    )
    domains = sorted({d for e in cps for d in e["per_domain"]})
    for d in domains:
        ax.plot(
            steps,
            [100 * e["per_domain"].get(d, float("nan")) for e in cps],
            ".--",
            lw=1,
            label=f"FlyRoute: {d}",
        )
    if cps and cps[0].get("bm25_accuracy") is not None:
        ax.plot(
            steps, [100 * e["bm25_accuracy"] for e in cps], "s:", color="gray", label="BM25 argmax"
        )
    for name, e in results["baselines"].items():
        ax.axhline(100 * e["accuracy"], ls="-.", color="tab:red", alpha=0.7, label=name)
    ax.set_xlabel("replayed training queries")
    ax.set_ylabel("test routing accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title("Routing accuracy over the replay")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_growth(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = results["growth"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for a, sizes in g["sizes"].items():
        ax.plot(g["step"][-len(sizes) :], sizes, lw=1.6, label=a)
    ax.set_xlabel("replayed training queries")
    ax.set_ylabel("success-store size |E_a| (seeds included)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Success-store growth per agent")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(
    results: dict[str, Any] | str | Path, out_dir: str | Path | None = None
) -> dict[str, Path]:
    """Writes ``report.md``, ``accuracy.png`` and ``growth.png``; returns their paths.

    Args:
      results: the results dict, or the path of a ``results.json``.
      out_dir: output folder (default: the folder of ``results.json``).
    """
    if not isinstance(results, dict):
        src = Path(results)
        if not src.is_file():
            raise FileNotFoundError(f"results file not found: {src}")
        results = json.loads(src.read_text())
        out_dir = out_dir or src.parent
    if out_dir is None:
        raise ValueError("out_dir is required when results is a dict")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "accuracy": out / "accuracy.png",
        "growth": out / "growth.png",
        "report": out / "report.md",
    }
    _plot_accuracy(results, paths["accuracy"])
    _plot_growth(results, paths["growth"])
    final_sizes = results["checkpoints"][-1]["store_sizes"] if results["checkpoints"] else {}
    lines = [
        "# FlyRoute replay report",
        "",
        f"{results['n_train']} training queries replayed, {results['n_test']} test queries, "
        f"agents: {', '.join(results['agents'])}.",
        "",
        "## Test routing accuracy (%)",
        "",
        accuracy_table(results),
        "",
        "## Success stores at the last checkpoint",
        "",
        "| agent | store size | explored dispatches |",
        "| --- | --- | --- |",
        *(
            f"| {a} | {s} | {results.get('explored_per_agent', {}).get(a, 0)} |"
            for a, s in final_sizes.items()
        ),
        "",
        "![accuracy](accuracy.png)",
        "",
        "![growth](growth.png)",
        "",
    ]
    paths["report"].write_text("\n".join(lines))
    return paths
