"""Routing on a run's whole held-out split, at the start and at the end of training.

Opens the run read-only, routes every ``eval_id`` record with the router as initialised
(the run's seed: the state before round 1) and as restored from the last checkpoint, at the
run's evaluation tau with no exploration, and reports for each: mean active agents per
query and routing NMI between domain and top-1 agent, each with a 95 % bootstrap interval
over queries (``mean_active_ci``, ``nmi_ci``), familiarity and top-1 counts by domain
(``coevo_jax.train.probe.summarize``). Features only: nothing is generated. It also reports
the features' geometry (``geometry``): how much of their norm is the shared mean, and the
mean cosine between queries of each pair of domains, raw and whitened, which is what
``router.feature_norm`` is about; with ``--probe-fit N``, how well a linear classifier fitted
on N training queries reads the domain off the features (``linear_probe``).

    python -m benchmarks.cpu_reference_routing --run runs/cpu_reference --out routing.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np


def features_of(system, records, chunk: int = 32) -> np.ndarray:
    """``[Q, D]`` raw router features of ``records``, as training computes them."""
    return np.concatenate(
        [
            np.asarray(
                system.query_features([system.router_prompt(r) for r in records[s : s + chunk]])
            )
            for s in range(0, len(records), chunk)
        ]
    )


def geometry(h: np.ndarray, domains: list[str]) -> dict:
    """Shared-mean share of ``h [Q, D]`` and mean cosine between domains, raw and whitened
    (each dimension to zero mean and unit variance over ``h`` itself)."""

    def cosines(x):
        u = x / np.linalg.norm(x, axis=1, keepdims=True)
        c = u @ u.T
        labels = sorted(set(domains))
        dom = np.asarray(domains)
        return {
            a: {b: round(float(c[np.ix_(dom == a, dom == b)].mean()), 4) for b in labels}
            for a in labels
        }

    h = np.asarray(h, np.float64)
    return {
        "mean_norm_share": round(
            float(np.linalg.norm(h.mean(0)) / np.linalg.norm(h, axis=1).mean()), 4
        ),
        "cosine_raw": cosines(h),
        "cosine_whitened": cosines((h - h.mean(0)) / h.std(0)),
    }


def linear_probe(h_fit, d_fit, h_test, d_test) -> dict:
    """How well a linear classifier reads the domain off the router's features: multinomial
    logistic regression fitted on ``h_fit`` and scored on ``h_test``, both whitened with
    ``h_fit``'s statistics exactly as ``router.feature_norm=standardize`` whitens (its floor
    on barely varying dimensions included). An upper bound on what a familiarity head, itself
    linear in the features, could separate; ``chance`` is the largest domain's share of the
    test queries."""
    from sklearn.linear_model import LogisticRegression

    from coevo_jax.router.features import standardization, standardize

    shift, scale = standardization(jnp.asarray(h_fit))
    clf = LogisticRegression(max_iter=2000).fit(np.asarray(standardize(h_fit, shift, scale)), d_fit)
    pred = clf.predict(np.asarray(standardize(h_test, shift, scale)))
    _, counts = np.unique(d_test, return_counts=True)
    return {
        "fit_queries": len(d_fit),
        "test_queries": len(d_test),
        "accuracy": round(float(np.mean(pred == np.asarray(d_test))), 4),
        "chance": round(float(counts.max() / counts.sum()), 4),
    }


def nmi_ci(top1_by_domain: dict[str, list[int]]) -> list[float]:
    """95 % bootstrap interval (over queries) of the routing NMI between domain and top-1
    agent, from its contingency table ``{domain: [N] counts of top-1 agents}`` (a
    ``routing.json``'s ``top1_by_domain``): the NMI depends on the queries only through it."""
    from coevo_jax.eval.stats import query_bootstrap_ci
    from coevo_jax.train.probe import routing_nmi

    domains = np.concatenate([[d] * sum(c) for d, c in sorted(top1_by_domain.items())])
    top1 = np.concatenate(
        [np.repeat(np.arange(len(c)), c) for _, c in sorted(top1_by_domain.items())]
    )
    return list(query_bootstrap_ci(routing_nmi, domains, top1))


def stats(system, records, h: np.ndarray) -> dict:
    from coevo_jax.eval.stats import bootstrap_ci
    from coevo_jax.router import route
    from coevo_jax.train import probe

    cfg = system.cfg
    f = np.asarray(route(system.router, jnp.asarray(h), train=False).f)
    active = probe.eval_activation(
        f, tau=cfg.eval_tau, routing=cfg.router.routing, top_k=cfg.router.top_k
    )
    domains = [probe.domain_of(r) for r in records]
    out = probe.summarize(domains, f, active, np.zeros(len(records)), np.zeros(len(records)))
    for k in ("macro_reward", "reward_by_domain", "tokens_per_query"):
        out.pop(k)  # nothing generated here
    out["mean_active_ci"] = list(bootstrap_ci(active.sum(axis=1)))
    out["nmi_ci"] = nmi_ci(out["top1_by_domain"])
    out["eval_tau"] = cfg.eval_tau
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--split", default="eval_id")
    p.add_argument("--out", default=None)
    p.add_argument(
        "--probe-fit",
        type=int,
        default=0,
        help="also fit a linear domain classifier on this many training queries (linear_probe)",
    )
    a = p.parse_args(argv)

    from coevo_jax import data
    from coevo_jax._config import from_dict
    from coevo_jax.train.checkpoint import latest_checkpoint
    from coevo_jax.train.config import TrainConfig
    from coevo_jax.train.system import System

    run = Path(a.run)
    cfg = from_dict(TrainConfig, json.loads((run / "config.json").read_text()))
    records = data.read_records(run / "data" / f"{a.split}.jsonl")
    system = System(cfg, engine_dir=run, warn_dtype=False)
    try:
        # the router as the run initialised it: whitened over its training queries
        system.whiten(system.feature_sample(data.read_records(run / "data" / "train.jsonl")))
        h = features_of(system, records)
        result = {"run": str(run), "split": a.split, "start": stats(system, records, h)}
        ckpt = latest_checkpoint(run / "checkpoints")
        if ckpt is None:
            raise SystemExit(f"{run}: no checkpoint")
        host = system.restore(ckpt)
        result["end"] = stats(system, records, h)
        from coevo_jax.train.probe import domain_of

        domains = [domain_of(r) for r in records]
        result["feature_geometry"] = geometry(h, domains)
        if a.probe_fit:
            fit = data.read_records(run / "data" / "train.jsonl")
            fit = [fit[i] for i in np.random.default_rng(0).permutation(len(fit))[: a.probe_fit]]
            result["feature_geometry"]["linear_probe"] = linear_probe(
                features_of(system, fit), [domain_of(r) for r in fit], h, domains
            )
        result["end"]["checkpoint_round"] = int(host["round"])
    finally:
        system.close()
    for k in ("start", "end"):
        r = result[k]
        print(
            f"{k}: mean active {r['mean_active']:.2f}, NMI {r['nmi']:.3f}, top-1 {r['top1_by_domain']}"
        )
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
