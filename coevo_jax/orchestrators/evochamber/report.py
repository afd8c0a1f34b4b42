"""Run report: the EvoChamber paper's Figure 3 signals, from the event log alone.

- accuracy per niche (docs/design.md §7) under the EvoChamber paper's metric of that niche
  (exact match for math, pass@1 on all tests for code, token F1 for QA;
  :mod:`coevo_jax.orchestrators.scoring`): the mean of the team's metric value, which for 0/1
  metrics is the solved fraction; the training reward's partial credit is a separate column;
  baselines beside when given;
- anchor counts per (agent, niche);
- the CoDream giver -> recipient matrix (insight writes);
- lifecycle events over time, with the pool size;
- specialization index: how concentrated anchor duty is. Our reading of the EvoChamber
  paper's index is the normalised Herfindahl index of anchor shares,
  SI = (sum_i p_i^2 - 1/P) / (1 - 1/P), with P the active pool size (0 = every agent anchors
  equally often, 1 = one agent anchors everything). Reported per niche and over a sliding
  window of tasks.

``write_report`` writes ``report.json``, ``report.md`` and PNGs (matplotlib, Agg backend).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.scoring import METRIC_LABELS


def specialization_index(anchor_counts: Sequence[int] | Mapping[str, int], pool_size: int) -> float:
    """Normalised HHI of anchor shares over a pool of ``pool_size`` agents (those with zero
    count included implicitly). 0.0 for an empty window or a pool of one."""
    counts = np.asarray(
        list(anchor_counts.values()) if isinstance(anchor_counts, Mapping) else anchor_counts,
        np.float64,
    )
    total = counts.sum()
    if total <= 0 or pool_size <= 1:
        return 0.0
    hhi = float(((counts / total) ** 2).sum())
    return (hhi - 1.0 / pool_size) / (1.0 - 1.0 / pool_size)


def summarize(
    events: Sequence[Mapping[str, Any]], cfg: EvoChamberConfig, window: int | None = None
) -> dict[str, Any]:
    """Everything the plots show, as plain data (see the module docstring)."""
    window = window or 2 * cfg.tau
    tasks = [e for e in events if e["type"] == "task"]
    niches = list(dict.fromkeys(e["niche"] for e in tasks))
    pool = cfg.pool_size
    pool_sizes, lifecycle, anchors_seq = [], [], []
    anchor = {}
    giver_recipient: dict[str, dict[str, int]] = {}
    structures: dict[str, dict[str, int]] = {}
    per_niche: dict[str, list[float]] = {z: [] for z in niches}
    partial: dict[str, list[float]] = {z: [] for z in niches}
    metric: dict[str, set[str]] = {z: set() for z in niches}
    sessions = skipped = 0
    for e in events:
        if e["type"] == "lifecycle":
            pool += {"genesis": 1, "fork": 1, "merge": -1, "prune": -1}.get(e["op"], 0)
            lifecycle.append({k: v for k, v in e.items() if k != "type"})
            continue
        per_niche[e["niche"]].append(float(e["reward"]))
        partial[e["niche"]].append(float(e.get("partial", e["reward"])))
        metric[e["niche"]].add(e.get("metric", "reward"))
        a = e["team"][0]
        anchor.setdefault(a, {}).setdefault(e["niche"], 0)
        anchor[a][e["niche"]] += 1
        anchors_seq.append(a)
        pool_sizes.append(pool)
        structures.setdefault(e["niche"], {}).setdefault(e["structure"], 0)
        structures[e["niche"]][e["structure"]] += 1
        if e.get("codream") and e["codream"].get("skipped"):
            skipped += 1
        elif e.get("codream"):
            sessions += 1
            for ins in e["codream"]["insights"]:
                row = giver_recipient.setdefault(ins["giver"], {})
                for r in ins["recipients"]:
                    row[r] = row.get(r, 0) + 1
    si_time = []
    for t in range(len(anchors_seq)):
        lo = max(0, t + 1 - window)
        names, counts = np.unique(anchors_seq[lo : t + 1], return_counts=True)
        si_time.append(specialization_index(counts, pool_sizes[t]))
    si_niche = {}
    for z in niches:
        counts = [anchor[a].get(z, 0) for a in anchor]
        si_niche[z] = specialization_index(counts, max(pool_sizes) if pool_sizes else pool)
    rewards = [float(e["reward"]) for e in tasks]
    solved = [bool(e.get("solved", float(e["reward"]) >= 1.0)) for e in tasks]
    return {
        "tasks": len(tasks),
        "accuracy": float(np.mean(rewards)) if rewards else 0.0,
        "solved_rate": float(np.mean(solved)) if solved else 0.0,
        "partial_credit": float(np.mean([x for v in partial.values() for x in v]))
        if tasks
        else 0.0,
        "metric_per_niche": {z: "/".join(sorted(m)) for z, m in metric.items()},
        "accuracy_per_niche": {z: float(np.mean(v)) for z, v in per_niche.items()},
        "partial_credit_per_niche": {z: float(np.mean(v)) for z, v in partial.items()},
        "tasks_per_niche": {z: len(v) for z, v in per_niche.items()},
        "anchor_counts": anchor,
        "structure_counts": structures,
        "codream_sessions": sessions,
        "codream_skipped_no_success": skipped,
        "codream_matrix": giver_recipient,
        "lifecycle": lifecycle,
        "pool_size": pool_sizes,
        "specialization_index_over_time": si_time,
        "specialization_index_per_niche": si_niche,
        "llm_calls": int(sum(e.get("calls", 0) for e in tasks)),
    }


def _heatmap(
    ax, rows: list[str], cols: list[str], mat: np.ndarray, title: str, xlabel: str, ylabel: str
) -> None:
    im = ax.imshow(mat, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.figure.colorbar(im, ax=ax)


def write_report(
    events: Sequence[Mapping[str, Any]],
    cfg: EvoChamberConfig,
    out_dir: str | Path,
    *,
    baselines: Mapping[str, Mapping[str, Any]] | None = None,
    counters: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Writes report.json, report.md and the PNGs into ``out_dir``; returns the summary.

    ``baselines`` maps a baseline name to a summary with ``accuracy`` and
    ``accuracy_per_niche`` (see :mod:`baselines`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = summarize(events, cfg)
    s["baselines"] = dict(baselines or {})
    s["counters"] = dict(counters or {})
    (out / "report.json").write_text(json.dumps(s, indent=2))
    niches = list(s["accuracy_per_niche"])

    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(niches) + 2), 3.5))
    methods = {"EvoChamber": s["accuracy_per_niche"]}
    methods.update({k: v["accuracy_per_niche"] for k, v in s["baselines"].items()})
    width = 0.8 / len(methods)
    for i, (name, acc) in enumerate(methods.items()):
        ax.bar(
            np.arange(len(niches)) + i * width, [acc.get(z, 0.0) for z in niches], width, label=name
        )
    ax.set_xticks(np.arange(len(niches)) + 0.4 - width / 2, niches, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (niche metric)")
    ax.set_title("Accuracy per niche (EM math, pass@1 code, F1 QA)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "accuracy_per_niche.png", dpi=120)
    plt.close(fig)

    agents = sorted(s["anchor_counts"])
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(niches) + 3), max(3, 0.3 * len(agents) + 1)))
    mat = np.array([[s["anchor_counts"][a].get(z, 0) for z in niches] for a in agents] or [[0]])
    _heatmap(ax, agents, niches, mat, "Anchor counts", "niche", "agent")
    fig.tight_layout()
    fig.savefig(out / "anchor_counts.png", dpi=120)
    plt.close(fig)

    cm = s["codream_matrix"]
    givers = sorted(cm)
    recips = sorted({r for row in cm.values() for r in row})
    fig, ax = plt.subplots(figsize=(max(4, 0.3 * len(recips) + 3), max(3, 0.3 * len(givers) + 1)))
    mat = (
        np.array([[cm[g].get(r, 0) for r in recips] for g in givers])
        if givers and recips
        else np.zeros((1, 1))
    )
    _heatmap(
        ax,
        givers or ["-"],
        recips or ["-"],
        mat,
        "CoDream insights: giver -> recipient",
        "recipient",
        "giver",
    )
    fig.tight_layout()
    fig.savefig(out / "codream_matrix.png", dpi=120)
    plt.close(fig)

    fig, (ax0, ax) = plt.subplots(2, 1, figsize=(7, 4.5), sharex=True, height_ratios=(1, 1.4))
    ax0.plot(s["pool_size"], color="gray")
    ax0.set_ylabel("pool size")
    ax0.set_title("Lifecycle events over time")
    ops = ["genesis", "fork", "merge", "prune", "specialize"]
    for k, op in enumerate(ops):
        steps = [e["step"] for e in s["lifecycle"] if e["op"] == op]
        ax.scatter(steps, [k] * len(steps), marker="|", s=300)
    ax.set_yticks(range(len(ops)), ops)
    ax.set_ylim(-0.5, len(ops) - 0.5)
    ax.set_xlabel("task")
    fig.tight_layout()
    fig.savefig(out / "lifecycle.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(s["specialization_index_over_time"], label=f"sliding window ({2 * cfg.tau} tasks)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("task")
    ax.set_ylabel("specialization index")
    ax.set_title("Anchor concentration")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "specialization.png", dpi=120)
    plt.close(fig)

    final_pool = s["pool_size"][-1] if s["pool_size"] else cfg.pool_size
    lines = [
        "# EvoChamber report",
        "",
        f"tasks: {s['tasks']}, accuracy (mean of each niche's metric): {s['accuracy']:.3f}, "
        f"solved (full marks): {s['solved_rate']:.3f}, partial credit (training reward, "
        f"mean): {s['partial_credit']:.3f}, LLM calls: {s['llm_calls']}, CoDream sessions: "
        f"{s['codream_sessions']} (skipped, no member succeeded: "
        f"{s['codream_skipped_no_success']}), final pool: {final_pool}",
        "",
        "Each niche is scored with its metric (exact match: final answer equals the gold "
        "answer; pass@1 (all tests): one program passing every test; token F1: SQuAD token "
        "overlap). Partial credit is the training reward (fraction of tests / instructions).",
        "",
    ]
    cols = [
        "niche",
        "metric",
        "tasks (count)",
        "EvoChamber (metric)",
        "EvoChamber partial credit (mean)",
        *(f"{b} (metric)" for b in s["baselines"]),
        "specialization index (anchor HHI, 0-1)",
    ]
    lines += ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for z in niches:
        m = s["metric_per_niche"][z]
        row = [
            z,
            "/".join(METRIC_LABELS.get(x, x) for x in m.split("/")),
            str(s["tasks_per_niche"][z]),
            f"{s['accuracy_per_niche'][z]:.3f}",
            f"{s['partial_credit_per_niche'][z]:.3f}",
        ]
        row += [f"{v['accuracy_per_niche'].get(z, 0.0):.3f}" for v in s["baselines"].values()]
        row.append(f"{s['specialization_index_per_niche'][z]:.3f}")
        lines.append("| " + " | ".join(row) + " |")
    if s["counters"]:
        lines += [
            "",
            "counters: " + ", ".join(f"{k}={v}" for k, v in sorted(s["counters"].items())),
        ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return s
