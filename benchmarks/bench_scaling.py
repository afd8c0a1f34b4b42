"""How the policy step and the router cost grow with batch size and sequence length (JAX).

    python -m benchmarks.bench_scaling [--quick] [--model smollm2|tiny] [--budget-s S]

Grid: batch sizes 1, 8, 32, 128 x sequence lengths 128, 256, 512, 1024 tokens.

- **policy step**: ``coevo_jax.rl.train_step.make_policy_step`` (GSPO, 4 LoRA agents r=16,
  remat, fp32), each sequence ``L/4`` prompt + ``3L/4`` completion tokens, rows assigned to
  agents round-robin; figure = seconds per step and completion tokens/s.
- **router**: ``coevo_jax.router.features`` (partial pass to block ``floor(3L/4)``) + ``route``
  at inference; the query is the whole ``L``-token sequence; figure = seconds per batch and
  milliseconds per query.

Weights are random (the cost does not depend on their values): the SmolLM2-135M shape by
default, or a 2-layer, 64-wide Llama with ``--quick``/``--model tiny`` (CI). On a 2-core CPU
the big corners of the grid take hours, so points run in increasing size and once one takes
longer than ``--budget-s`` every point at least as large in both batch and length is skipped
(recorded as ``"skipped"``); on a GPU set a large budget. Writes
``benchmarks/results/scaling-*.json`` and a log-log plot ``scaling-*.png`` beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

BATCHES = (1, 8, 32, 128)
LENGTHS = (128, 256, 512, 1024)

TINY = {**common.TINY_LLAMA, "max_position_embeddings": 2048, "tie_word_embeddings": True}
# SmolLM2-135M (RECIPES.md): 30 layers, hidden 576, 9 heads / 3 KV heads, vocab 49152, tied.
SMOLLM2 = {
    **TINY,
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rope_theta": 100000.0,
}


def _median_time(fn, repeats: int) -> tuple[float, list[float], float]:
    t0 = time.perf_counter()
    fn()  # compile + first run
    first = time.perf_counter() - t0
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts, first


def policy_point(params, cfg, b: int, seq: int, repeats: int, n_agents: int, rank: int):
    import jax
    import jax.numpy as jnp

    from coevo_jax.lora import LoRAConfig, init_lora
    from coevo_jax.rl.config import RLConfig
    from coevo_jax.rl.logprobs import PolicyBatch
    from coevo_jax.rl.train_step import init_policy_state, make_policy_step

    p_len = seq // 4
    t_len = seq - p_len
    rng = np.random.default_rng(0)
    batch = PolicyBatch(
        prompt_ids=jnp.asarray(rng.integers(2, cfg.vocab_size, (b, p_len)), jnp.int32),
        prompt_mask=jnp.ones((b, p_len), jnp.int32),
        completion_ids=jnp.asarray(rng.integers(2, cfg.vocab_size, (b, t_len)), jnp.int32),
        completion_mask=jnp.ones((b, t_len), jnp.int32),
        agent_ids=jnp.asarray(np.arange(b) % n_agents, jnp.int32),
        advantages=jnp.asarray(rng.normal(0, 1, b), jnp.float32),
        old_logp=jnp.full((b, t_len), -5.0, jnp.float32),
    )
    lora = init_lora(
        jax.random.key(0),
        LoRAConfig(n_agents=n_agents, rank=rank, alpha=2.0 * rank, dropout=0.0),
        params,
    )
    rl = RLConfig(compute_dtype="float32", remat=True, level="sequence", loss_type="grpo")
    step = make_policy_step(cfg, rl)
    holder = {"state": init_policy_state(lora, rl, jax.random.key(1))}

    def run():
        holder["state"], metrics = step(holder["state"], params, batch)
        jax.block_until_ready(metrics)

    med, ts, first = _median_time(run, repeats)
    return {"step_s": med, "times_s": ts, "first_call_s": first, "tokens_per_s": b * t_len / med}


def router_point(params, cfg, state, b: int, seq: int, repeats: int):
    import jax
    import jax.numpy as jnp

    from coevo_jax.router import features, route

    rng = np.random.default_rng(1)
    ids = jnp.asarray(rng.integers(2, cfg.vocab_size, (b, seq)), jnp.int32)
    mask = jnp.ones((b, seq), jnp.int32)

    def run():
        h = features(params, cfg, ids, mask, max_len=seq)
        jax.block_until_ready(route(state, h, train=False).active)

    med, ts, first = _median_time(run, repeats)
    return {"batch_s": med, "times_s": ts, "first_call_s": first, "ms_per_query": 1e3 * med / b}


def sweep(kind: str, fn, batches, lengths, budget_s: float) -> dict[str, Any]:
    """Runs ``fn(b, seq)`` over the grid, smallest first, skipping points that dominate a slow one."""
    out: dict[str, Any] = {}
    too_slow: list[tuple[int, int]] = []
    for b in batches:
        for seq in lengths:
            key = f"b{b}_L{seq}"
            if any(b >= sb and seq >= sl for sb, sl in too_slow):
                out[key] = "skipped"
                continue
            try:
                res = fn(b, seq)
            except Exception as e:  # noqa: BLE001 - e.g. out of memory: record, keep sweeping
                out[key] = f"failed: {type(e).__name__}: {str(e)[:200]}"
                too_slow.append((b, seq))
                continue
            out[key] = res
            t = res.get("step_s", res.get("batch_s"))
            print(f"  {kind} b={b:>3} L={seq:>4}: {t:.4g} s", flush=True)
            if t > budget_s:
                too_slow.append((b, seq))
    return out


def plot(result: dict[str, Any], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, kind, field, label in (
        (axes[0], "policy_step", "step_s", "policy step: seconds per step"),
        (axes[1], "router", "batch_s", "router: seconds per batch"),
    ):
        for b in result["config"]["batches"]:
            xs, ys = [], []
            for seq in result["config"]["lengths"]:
                r = result["figures"][kind].get(f"b{b}_L{seq}")
                if isinstance(r, dict):
                    xs.append(seq)
                    ys.append(r[field])
            if xs:
                ax.plot(xs, ys, marker="o", label=f"batch {b}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"{result['config']['model']} ({result['config']['backend']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figures(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """No JAX-vs-PyTorch rows: the sweep is reported by ``summary``."""
    return []


def summary(rec: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """The sweep reduced to one number per point (or ``"skipped"``/``"failed: ..."``), for
    ``run_all``'s scaling table: seconds per step (policy step) and per batch (router), plus
    the plot ``main`` writes beside the record at ``path`` (``None`` if it is not there)."""
    out: dict[str, Any] = {"config": rec["config"]}
    for kind, field in (("policy_step", "step_s"), ("router", "batch_s")):
        out[kind] = {
            k: (v[field] if isinstance(v, dict) else str(v))
            for k, v in rec["figures"][kind].items()
        }
    png = Path(path).with_suffix(".png")
    out["plot"] = str(png) if png.exists() else None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, batch 1/8, length 128/256")
    ap.add_argument("--model", choices=("smollm2", "tiny"), default=None)
    ap.add_argument("--batches", type=int, nargs="+", default=None)
    ap.add_argument("--lengths", type=int, nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=30.0, help="per-point time that ends a row")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    args = ap.parse_args(argv)
    model = args.model or ("tiny" if args.quick else "smollm2")
    batches = tuple(args.batches or ((1, 8) if args.quick else BATCHES))
    lengths = tuple(args.lengths or ((128, 256) if args.quick else LENGTHS))
    repeats = args.repeats or (1 if args.quick else 2)

    import jax

    from coevo_jax.models import ModelConfig, init_params
    from coevo_jax.router import RouterConfig, init_router

    hf = TINY if model == "tiny" else SMOLLM2
    cfg = ModelConfig.from_hf_dict(hf)
    params = init_params(cfg, jax.random.key(0))
    rstate = init_router(RouterConfig().inference(), 2 * cfg.hidden_size)

    print(f"scaling on {model} ({jax.default_backend()})", flush=True)
    figures = {
        "policy_step": sweep(
            "policy step",
            lambda b, s: policy_point(params, cfg, b, s, repeats, args.agents, args.rank),
            batches,
            lengths,
            args.budget_s,
        ),
        "router": sweep(
            "router",
            lambda b, s: router_point(params, cfg, rstate, b, s, repeats),
            batches,
            lengths,
            args.budget_s,
        ),
    }
    config = {
        "model": f"{model} (random weights, {cfg.num_layers} layers, hidden {cfg.hidden_size})",
        "batches": list(batches),
        "lengths": list(lengths),
        "repeats": repeats,
        "budget_s": args.budget_s,
        "agents": args.agents,
        "rank": args.rank,
        "backend": jax.default_backend(),
        "policy": "GSPO, remat, fp32, prompt L/4 + completion 3L/4",
        "quick": args.quick,
    }
    result = {"config": config, "figures": figures}
    out = common.write_result("scaling", result)
    png = out.with_suffix(".png")
    plot(result, png)
    rows = []
    for b in batches:
        for seq in lengths:
            p = figures["policy_step"][f"b{b}_L{seq}"]
            r = figures["router"][f"b{b}_L{seq}"]
            rows.append(
                {
                    "batch": b,
                    "length": seq,
                    "policy step s": p["step_s"] if isinstance(p, dict) else p,
                    "policy tok/s": p["tokens_per_s"] if isinstance(p, dict) else "-",
                    "router ms/query": r["ms_per_query"] if isinstance(r, dict) else r,
                }
            )
    print(common.format_table(rows))
    print(f"wrote {out} and {png}")
    return {**result, "path": str(out), "plot": str(png)}


if __name__ == "__main__":
    main()
