"""The router alone, replayed on a finished run's agents: how fast can it learn to route them?

A co-evolution run mixes two learners, so when routing fails to concentrate it is not clear
which one is slow. This replays only the router: the real router (``route``,
``router_step``, ``update_counters``, the run's config, seed and whitening) over the run's
real router features (its training queries in the run's order; held-out ``eval_id`` queries
for scoring), with the agents replaced by their measured accuracy. Agent ``i`` answers a
query of domain ``d`` correctly with probability ``p[i, d]``, its greedy held-out accuracy
in the run's evaluation report (``single:i``), and a group's mean reward is a
Binomial(``group_size``, p) draw over ``group_size``. With ``--ramp R`` the accuracies move
linearly from the base model's (every agent alike) to the final ones over the first R
rounds, as agents that start equal and specialise would; ``--ramp 0`` starts them
specialised. The generation-entropy bonus is left out (every agent's is 0).

For each router schedule (``update_steps x replay_rounds``, ``router.update_steps`` and
``router.replay_rounds``; ``--feature-center`` overrides ``router.feature_center``) and each
reward seed it reports, every ``--every`` rounds, on the
held-out queries at the run's evaluation tau without exploration: mean active agents, the
NMI between domain and top-1 agent, and the expected accuracy of answering each query with
its top-1 agent (``top1_accuracy``, from ``p``). It also reports ``target_coherence``: how
much of the frozen target heads' output direction the held-out queries of a domain share at
the run's whitening, which caps the familiarity a head reaches on unseen queries (see
``router.feature_center``). Writes ``router_replay.json`` and a plot of
the curves to ``--out``.

    python -m benchmarks.router_replay --run-config benchmarks/results/cpu_conflict/config.json \\
        --report benchmarks/results/cpu_conflict/report.json --out benchmarks/results/cpu_conflict
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from benchmarks import common


def held_out_accuracy(report: dict, n_agents: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(domains, p [N, D], base [D])`` from an evaluation report's ``single:i`` and
    ``base`` per-dataset accuracies."""
    res = report["results"]
    domains = sorted(res["base"]["by_dataset"])
    p = np.array([[res[f"single:{i}"]["by_dataset"][d] for d in domains] for i in range(n_agents)])
    return domains, p, np.array([res["base"]["by_dataset"][d] for d in domains])


def initial_router(rc, h_train: np.ndarray, seed: int):
    """The router state a run starts from: heads from ``seed`` and the whitening of the
    trainer's own sample (``router.norm_queries`` training queries drawn with ``seed``)."""
    import jax.numpy as jnp

    from coevo_jax.router import init_router, with_feature_stats
    from coevo_jax.train.setup import whitening_sample

    state = init_router(rc, h_train.shape[1], seed=seed)
    idx = whitening_sample(len(h_train), rc.norm_queries, seed)
    return with_feature_stats(state, jnp.asarray(h_train[idx]))


def target_coherence(state, h: np.ndarray, d: np.ndarray) -> dict:
    """How much of the frozen targets' output direction a domain shares, at ``state``'s
    whitening: the ceiling on the familiarity a head reaches on queries it has not seen.

    For each domain and agent, ``u_q`` is the unit target output ``cbar_i(h_q)`` of the
    domain's queries ``h [Q, D]`` (domain indices ``d [Q]``). ``coherence`` is ``|mean u_q|``,
    the mean cosine between the ``u_q`` and the best single direction; ``f_constant`` is the
    mean familiarity ``exp(-lam * |u_q - that direction|)`` a head reaches by predicting it
    for the whole domain. Both are averaged over domains and agents (``min`` over them too).
    """
    import jax.numpy as jnp

    _, target = state.head.project(state.head_input(jnp.asarray(h)))
    u = np.asarray(target, np.float64)
    u /= np.linalg.norm(u, axis=-1, keepdims=True)  # [Q, N, out]
    coh, fc = [], []
    for k in np.unique(d):
        m = u[d == k].mean(0)  # [N, out]
        coh.append(np.linalg.norm(m, axis=-1))
        best = m / np.linalg.norm(m, axis=-1, keepdims=True)
        dist = np.linalg.norm(u[d == k] - best[None], axis=-1)  # [Q_k, N]
        fc.append(np.exp(-state.cfg.lam * dist).mean(0))
    coh, fc = np.array(coh), np.array(fc)
    return {
        "coherence": round(float(coh.mean()), 4),
        "coherence_min": round(float(coh.min()), 4),
        "f_constant": round(float(fc.mean()), 4),
        "f_constant_max": round(float(fc.max()), 4),
    }


def replay(
    cfg,
    schedule: tuple[int, int],
    h_train: np.ndarray,
    d_train: np.ndarray,
    h_eval: np.ndarray,
    d_eval: np.ndarray,
    p_end: np.ndarray,
    p_start: np.ndarray,
    *,
    rounds: int,
    ramp: int,
    every: int,
    seed: int,
) -> list[dict]:
    """One replayed run of the router under ``schedule = (update_steps, replay_rounds)``.

    ``h_*`` are raw features ``[Q, D]``, ``d_*`` domain indices ``[Q]``, ``p_end``/``p_start``
    ``[N, D]`` accuracies. Returns the held-out metrics every ``every`` rounds (and at the
    end).
    """
    import jax.numpy as jnp

    from coevo_jax.router import RouterReplay, push_round, route, router_step, update_counters
    from coevo_jax.train.probe import eval_activation, routing_nmi
    from coevo_jax.train.setup import QueryStream

    steps, window = schedule
    rc = dataclasses.replace(cfg.router, update_steps=steps, replay_rounds=window)
    lc, g = cfg.loop, cfg.rollout.group_size
    state = initial_router(rc, h_train, lc.seed)
    memory = RouterReplay.empty(window, lc.queries_per_round, h_train.shape[1], rc.n_agents)
    stream, rng = QueryStream(len(h_train), lc.seed), np.random.default_rng(seed)
    h_eval = jnp.asarray(h_eval)
    out = []
    for t in range(rounds + 1):
        if t % every == 0 or t == rounds:
            f = np.asarray(route(state, h_eval, train=False).f)
            active = eval_activation(f, tau=cfg.eval_tau, routing=rc.routing, top_k=rc.top_k)
            top1 = f.argmax(axis=1)
            out.append(
                {
                    "round": t,
                    "mean_active": float(active.sum(axis=1).mean()),
                    "nmi": routing_nmi(d_eval.tolist(), top1),
                    "top1_accuracy": float(p_end[top1, d_eval].mean()),
                }
            )
        if t == rounds:
            return out
        q = np.asarray(stream.next(lc.queries_per_round))
        p = p_start + (p_end - p_start) * (min(1.0, t / ramp) if ramp else 1.0)
        h = jnp.asarray(h_train[q])
        active = route(state, h, train=True).active
        rbar = jnp.asarray(rng.binomial(g, p[:, d_train[q]].T) / g, jnp.float32)
        memory = push_round(memory, h, rbar, active)
        for _ in range(steps):
            state, _ = router_step(state, *memory.flat())
        state = update_counters(state, active)
    return out


def summarize(curves: list[list[dict]]) -> dict:
    """Mean and range over seeds of each metric at the last round."""
    last = [c[-1] for c in curves]
    return {
        k: {
            "mean": float(np.mean([x[k] for x in last])),
            "min": float(min(x[k] for x in last)),
            "max": float(max(x[k] for x in last)),
        }
        for k in ("mean_active", "nmi", "top1_accuracy")
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("mean_active", "nmi", "top1_accuracy")
    fig, axes = plt.subplots(len(result["ramps"]), 3, figsize=(13, 3.4 * len(result["ramps"])))
    axes = np.atleast_2d(axes)
    for row, (ramp, by_schedule) in zip(axes, result["ramps"].items(), strict=True):
        for name, entry in by_schedule.items():
            for j, key in enumerate(keys):
                x = [r["round"] for r in entry["curves"][0]]
                y = np.mean([[r[key] for r in c] for c in entry["curves"]], axis=0)
                row[j].plot(x, y, marker="o", ms=3, label=name)
                row[j].set_title(f"{key} (ramp {ramp})")
                row[j].set_xlabel("round")
        row[0].legend(title="steps x window", fontsize=8)
    fig.suptitle("The router replayed alone on the run's final agents (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-config", required=True, help="the run's config.json or YAML")
    ap.add_argument("--report", required=True, help="the run's evaluation report.json")
    ap.add_argument("--out", required=True, help="directory for router_replay.json/.png")
    ap.add_argument("--schedules", default="1x1,8x1,1x8,8x8,16x8")
    ap.add_argument("--ramps", default="15,0", help="comma-separated --ramp values")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, help="default: the run's loop.rounds")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--features", help="cache of the features (.npz), written when absent")
    ap.add_argument(
        "--feature-center",
        type=float,
        help="replay with this router.feature_center instead of the run's",
    )
    a = ap.parse_args(argv)

    from coevo_jax import data
    from coevo_jax.data.templates import render_chat
    from coevo_jax.train.config import load_config
    from coevo_jax.train.probe import domain_of
    from coevo_jax.train.setup import load_backbone, query_features

    cfg = load_config(a.run_config)
    if a.feature_center is not None:
        cfg = dataclasses.replace(
            cfg, router=dataclasses.replace(cfg.router, feature_center=a.feature_center)
        )
    report = json.loads(Path(a.report).read_text())
    domains, p_end, base = held_out_accuracy(report, cfg.router.n_agents)
    p_start = np.tile(base, (cfg.router.n_agents, 1))
    schedules = [tuple(int(x) for x in s.split("x")) for s in a.schedules.split(",")]
    rounds = a.rounds or cfg.loop.rounds

    t0 = time.perf_counter()
    built = data.build_mixture(cfg.data.mixture, seed=cfg.loop.seed)
    splits = {s: built.records[s] for s in ("train", "eval_id")}
    cache = Path(a.features) if a.features else None
    if cache is not None and cache.is_file():
        z = np.load(cache)
        feats = {s: z[s] for s in splits}
    else:
        bb = load_backbone(cfg.model)
        feats = {}
        for s, recs in splits.items():
            prompts = [render_chat(r, bb.tokenizer, cfg.data.max_input_tokens) for r in recs]
            feats[s] = np.concatenate(
                [
                    np.asarray(query_features(bb, cfg.router, prompts[i : i + 32]))
                    for i in range(0, len(prompts), 32)
                ]
            )
            print(f"features {s}: {feats[s].shape}", flush=True)
        if cache is not None:
            np.savez(cache, **feats)
    dom = {s: np.array([domains.index(domain_of(r)) for r in recs]) for s, recs in splits.items()}
    features_s = time.perf_counter() - t0

    result = {
        "run_config": a.run_config,
        "report": a.report,
        "domains": domains,
        "accuracy_end": p_end.tolist(),
        "accuracy_start": base.tolist(),
        "rounds": rounds,
        "queries": {s: len(r) for s, r in splits.items()},
        "eval_tau": cfg.eval_tau,
        "feature_center": cfg.router.feature_center,
        # held-out, at the run's initial whitening
        "target_coherence": target_coherence(
            initial_router(cfg.router, feats["train"], cfg.loop.seed),
            feats["eval_id"],
            dom["eval_id"],
        ),
        "seeds": a.seeds,
        "features_s": round(features_s, 1),
        "ramps": {},
    }
    rows = []
    for ramp in (int(r) for r in a.ramps.split(",")):
        by_schedule = result["ramps"][str(ramp)] = {}
        for sched in schedules:
            name = f"{sched[0]}x{sched[1]}"
            curves = [
                replay(
                    cfg,
                    sched,
                    feats["train"],
                    dom["train"],
                    feats["eval_id"],
                    dom["eval_id"],
                    p_end,
                    p_start,
                    rounds=rounds,
                    ramp=ramp,
                    every=a.every,
                    seed=seed,
                )  # fmt: skip
                for seed in range(a.seeds)
            ]
            by_schedule[name] = {"end": summarize(curves), "curves": curves}
            end = by_schedule[name]["end"]
            rows.append(
                {
                    "ramp": ramp,
                    "steps x window": name,
                    **{
                        k: f"{v['mean']:.3f} [{v['min']:.3f}, {v['max']:.3f}]"
                        for k, v in end.items()
                    },
                }
            )
            print(common.format_table(rows[-1:]), flush=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["machine"] = common.machine_info()
    result["git_commit"] = common.git_commit()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "router_replay.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out / "router_replay.png")
    print(common.format_table(rows))
    return result


if __name__ == "__main__":
    main()
