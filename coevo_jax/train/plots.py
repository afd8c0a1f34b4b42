"""Training plots as PNG (the paper's Figures 3, 5, 6, 7), written during and after a run.

- ``system_reward.png``: system and per-agent mean reward over rounds;
- ``logprob_gap.png``: the reward beside the engine/trainer log-prob gap per agent
  (``metrics.jsonl`` key ``gap``, ``coevo_jax.train.gap``);
- ``updates_per_agent.png``: cumulative policy steps per agent (the adaptive update frequency);
- ``familiarity_by_class.png``: mean familiarity per agent and task class (heat map);
- ``activated_agents.png``: histogram of how many agents each query activated;
- ``router_tsne.png``: t-SNE of router features coloured by the most familiar activated agent
  (the run's bounded reservoir sample of them, ``loop.feature_log_size`` rows at most);
- ``probe_curves.png``: the held-out probe over training (``coevo_jax.train.probe``): macro
  reward, mean active agents at the evaluation tau, routing NMI, and familiarity by domain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from coevo_jax.train.metrics import read_metrics  # noqa: E402

FEATURES_FILE = "router_features.npz"
TSNE_MAX_POINTS = 4096


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def plot_run(run_dir: str | os.PathLike) -> list[Path]:
    """Writes every plot the run's data allows into ``run_dir/plots``; returns their paths."""
    run_dir = Path(run_dir)
    out_dir = run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = read_metrics(run_dir)
    written: list[Path] = []
    if rows:
        written += _reward(rows, out_dir)
        written += _gap(rows, out_dir)
        written += _updates(rows, out_dir)
        written += _familiarity(rows, out_dir)
        written += _activations(rows, out_dir)
        written += plot_probe(rows, out_dir)
    feats = run_dir / FEATURES_FILE
    if feats.is_file():
        written += _tsne(feats, out_dir)
    return written


def _reward(rows: list[dict], out_dir: Path) -> list[Path]:
    r = [m["round"] for m in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(r, [m["system_reward"] for m in rows], "k-o", lw=2, ms=3, label="system")
    n = len(rows[0]["agent_reward"])
    for i in range(n):
        ys = [m["agent_reward"][i] for m in rows]
        ax.plot(r, [np.nan if y is None else y for y in ys], "-", alpha=0.7, label=f"agent {i}")
    ax.set(xlabel="round", ylabel="mean reward", title="Reward over training")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return [_save(fig, out_dir / "system_reward.png")]


def _gap(rows: list[dict], out_dir: Path) -> list[Path]:
    """Reward (left) beside the mean |delta log p| per token and the worst sequence's
    |log-ratio| of each agent (right), on a log scale: an exact engine sits near 1e-7, a
    bf16 one near 1e-2, a mis-served adapter near 1e-1 and above."""
    rows = [m for m in rows if m.get("gap")]
    if not rows:
        return []
    r = [m["round"] for m in rows]
    agents = sorted({a for m in rows for a in m["gap"]}, key=lambda a: (len(a), a))
    fig, (ax_r, ax_g) = plt.subplots(1, 2, figsize=(11, 4))
    ax_r.plot(r, [m["system_reward"] for m in rows], "k-o", lw=2, ms=3, label="system")
    ax_r.set(xlabel="round", ylabel="mean reward", title="Reward")
    ax_r.grid(alpha=0.3)
    for i, a in enumerate(agents):
        color = f"C{i % 10}"
        gap = [m["gap"].get(a) for m in rows]
        tok = [np.nan if g is None else max(g["token_abs"], 1e-9) for g in gap]
        worst = [np.nan if g is None else max(g["seq_absmax"], 1e-9) for g in gap]
        ax_g.plot(r, tok, "-o", color=color, ms=3, label=f"agent {a}: mean |dlogp|/token")
        ax_g.plot(r, worst, ":", color=color, alpha=0.7, label=f"agent {a}: worst sequence")
    ax_g.set(xlabel="round", ylabel="nats", yscale="log", title="Engine vs trainer log-prob gap")
    ax_g.legend(fontsize=7, ncol=2)
    ax_g.grid(alpha=0.3, which="both")
    return [_save(fig, out_dir / "logprob_gap.png")]


def _updates(rows: list[dict], out_dir: Path) -> list[Path]:
    r = [m["round"] for m in rows]
    ups = np.array([m["updates"] for m in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    for i in range(ups.shape[1]):
        ax.step(r, ups[:, i], where="post", label=f"agent {i}")
    ax.set(xlabel="round", ylabel="cumulative policy steps", title="Updates per agent")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return [_save(fig, out_dir / "updates_per_agent.png")]


def _familiarity(rows: list[dict], out_dir: Path) -> list[Path]:
    tail = rows[-max(1, len(rows) // 4) :]
    classes = sorted({c for m in tail for c in m["familiarity"]["by_class"]})
    if not classes:
        return []
    n = len(tail[0]["familiarity"]["mean"])
    grid = np.full((n, len(classes)), np.nan)
    for j, c in enumerate(classes):
        vals = [m["familiarity"]["by_class"][c] for m in tail if c in m["familiarity"]["by_class"]]
        grid[:, j] = np.mean(np.array(vals, dtype=float), axis=0)
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(classes), 1.2 + 0.6 * n))
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(classes)), classes)
    ax.set_yticks(range(n), [f"agent {i}" for i in range(n)])
    for i in range(n):
        for j in range(len(classes)):
            ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color="w", fontsize=8)
    ax.set_title(f"Mean familiarity (last {len(tail)} rounds)")
    fig.colorbar(im, ax=ax)
    return [_save(fig, out_dir / "familiarity_by_class.png")]


def _activations(rows: list[dict], out_dir: Path) -> list[Path]:
    hist = np.sum([m["activated"]["histogram"] for m in rows], axis=0)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(np.arange(1, len(hist) + 1), hist, color="tab:blue")
    ax.set(xlabel="activated agents per query", ylabel="queries", title="Activation sizes")
    ax.set_xticks(np.arange(1, len(hist) + 1))
    return [_save(fig, out_dir / "activated_agents.png")]


def plot_probe(rows: list[dict], out_dir: Path) -> list[Path]:
    """``probe_curves.png`` from the rounds that carry a ``probe`` record (none: no plot).

    Panels: macro reward (and each domain's), mean active agents at the evaluation tau
    (with the 4-agent start and the 2-agent goal), routing NMI between domain and top-1
    agent, and each domain's familiarity of its most familiar agent.
    """
    probes = [m["probe"] for m in rows if m.get("probe")]
    if not probes:
        return []
    x = [p["after_rounds"] for p in probes]
    domains = sorted(probes[-1]["reward_by_domain"])
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0, 0]
    for d in domains:
        ys = [p["reward_by_domain"].get(d, np.nan) for p in probes]
        ax.plot(x, ys, "-", alpha=0.5, lw=1, label=d)
    ax.plot(x, [p["macro_reward"] for p in probes], "k-o", lw=2, ms=4, label="macro")
    ax.set(xlabel="rounds trained", ylabel="reward (top-1 agent, greedy)", title="Probe reward")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[0, 1]
    ax.plot(x, [p["mean_active"] for p in probes], "b-o", ms=4)
    n = len(next(iter(probes[-1]["familiarity_by_domain"].values())))
    ax.axhline(n, color="gray", ls=":", lw=1)
    ax.axhline(2, color="green", ls="--", lw=1, label="goal <= 2")
    ax.set(
        xlabel="rounds trained", ylabel="agents per query", title="Mean active agents (eval tau)"
    )
    ax.set_ylim(0.5, n + 0.5)
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    ax.plot(x, [p["nmi"] for p in probes], "m-o", ms=4)
    ax.axhline(0.3, color="green", ls="--", lw=1, label="goal >= 0.3")
    ax.set(xlabel="rounds trained", ylabel="NMI", title="Routing NMI (domain vs top-1 agent)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    for d in domains:
        ys = [max(p["familiarity_by_domain"].get(d, [np.nan])) for p in probes]
        ax.plot(x, ys, "-o", ms=3, label=d)
    ax.set(xlabel="rounds trained", ylabel="max_i mean f_i", title="Familiarity by domain")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    for a in axes.flat:
        a.grid(alpha=0.3)
    return [_save(fig, out_dir / "probe_curves.png")]


def _tsne(path: Path, out_dir: Path) -> list[Path]:
    data = np.load(path)
    h, agent = data["h"].astype(np.float32), data["agent"]
    if len(h) > TSNE_MAX_POINTS:  # a features file written before the log was bounded
        keep = np.sort(np.random.default_rng(0).choice(len(h), TSNE_MAX_POINTS, replace=False))
        h, agent = h[keep], agent[keep]
    # Fewer than 5 distinct points (e.g. an untrained tiny model's features): nothing to
    # embed, and sklearn's PCA init divides by a zero spread, whose NaNs crash Barnes-Hut.
    if len(h) < 5 or len(np.unique(h, axis=0)) < 5 or not np.isfinite(h).all():
        return []
    from sklearn.manifold import TSNE

    perplexity = float(min(30, max(2, (len(h) - 1) // 3)))
    xy = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=0).fit_transform(h)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for a in np.unique(agent):
        sel = agent == a
        ax.scatter(xy[sel, 0], xy[sel, 1], s=12, label=f"agent {a}", alpha=0.8)
    ax.set(title="Router features (t-SNE), by routed agent", xticks=[], yticks=[])
    ax.legend(fontsize=8)
    return [_save(fig, out_dir / "router_tsne.png")]
