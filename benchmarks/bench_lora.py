"""Stacked multi-agent LoRA: one mixed 4-agent pass against four single-agent passes.

Forward + backward (gradients w.r.t. the adapters) of the completion log-likelihood on
SmolLM2-135M, 8 sequences x 128 tokens in total:

- **stacked**: one jitted call, each row with its own agent's adapter (``A: [L, N, in, r]``);
- **4 passes (JAX)**: four jitted calls, 2 rows each, one agent each;
- **4 passes (PEFT)**: transformers + PEFT with 4 named adapters, ``set_adapter`` per agent,
  the natural PyTorch way to train several adapters.

Also the export time of one r=16 adapter in PEFT format, and the projected export time of a
Qwen3-4B-shaped adapter from the measured bytes/s.

Run ``python -m benchmarks.bench_lora [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchmarks import common

QWEN3_4B = dict(hidden=2560, inter=9728, layers=36, heads=32, kv=8, head_dim=128)


def adapter_params(hidden, inter, layers, heads, kv, head_dim, rank=16) -> int:
    q, k = heads * head_dim, kv * head_dim
    mats = [
        (hidden, q),
        (hidden, k),
        (hidden, k),
        (q, hidden),
        (hidden, inter),
        (hidden, inter),
        (inter, hidden),
    ]
    return layers * sum(rank * (a + b) for a, b in mats)


def stacked_vs_passes(params, cfg, lora, ids, agents, *, compute_dtype=None) -> dict:
    """Two callables doing the same work: the gradient w.r.t. the adapters of the completion
    log-likelihood of ``ids`` ``[B, T]``, each row under its own agent (``agents`` ``[B]``,
    sorted, equal counts): ``jax-stacked`` in one jitted call, ``jax-4-passes`` as one call per
    agent on that agent's rows (the way a single-adapter library trains N adapters)."""
    import jax
    import jax.numpy as jnp

    from coevo_jax.models import forward

    compute_dtype = jnp.float32 if compute_dtype is None else compute_dtype

    @jax.jit
    def grad_fn(base, lp, ids, agents):
        # The backbone is an argument, not a closure: closed-over arrays become constants.
        def loss(lp):
            logits = forward(
                base, cfg, ids, lora=(lora.replace(params=lp), agents), compute_dtype=compute_dtype
            ).logits
            logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), -1)
            return -jnp.take_along_axis(logp, ids[:, 1:, None], -1).mean()

        return jax.grad(loss)(lp)

    n_agents = int(agents.max()) + 1
    per = ids.shape[0] // n_agents

    def stacked():
        jax.block_until_ready(grad_fn(params, lora.params, ids, agents))

    def passes():
        for i in range(n_agents):
            rows = slice(i * per, (i + 1) * per)
            jax.block_until_ready(grad_fn(params, lora.params, ids[rows], agents[rows]))

    return {"jax-stacked": stacked, "jax-4-passes": passes}


# ----------------------------------------------------------------------------- figures (run_all)


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = rec["figures"]
    stacked, passes = f["jax-stacked"], f["jax-4-passes"]
    out = [
        common.figure(
            "lora_stacked_vs_4_passes_s",
            "s",
            stacked["median_s"],
            passes["median_s"],
            higher_is_better=False,
            spread_jax=[stacked["min_s"], stacked["max_s"]],
            spread_pytorch=[passes["min_s"], passes["max_s"]],
            note="fwd+bwd of a mixed 4-agent batch vs four single-agent passes (both JAX)",
            baseline="JAX, four single-agent passes",
        ),
        common.figure(
            "adapter_export_ms",
            "ms",
            1e3 * f["export_smollm2_r16"]["seconds"],
            None,
            higher_is_better=False,
            note="export_peft of one r=16 SmolLM2 adapter",
        ),
    ]
    for tok, v in f.get("sweep_tokens_per_agent", {}).items():
        out.append(
            common.figure(
                f"lora_stacked_vs_4_passes_{tok}_tokens_per_agent_s",
                "s",
                v["stacked_s"],
                v["four_passes_s"],
                higher_is_better=False,
                note=f"one row of {tok} tokens per agent (the memory-bound end)",
                baseline="JAX, four single-agent passes",
            )
        )
    if "peft-4-passes" in f:
        out.append(
            common.figure(
                "lora_stacked_vs_peft_4_passes_s",
                "s",
                stacked["median_s"],
                f["peft-4-passes"]["median_s"],
                higher_is_better=False,
                note="PEFT: set_adapter + fwd/bwd per agent",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 x 32 tokens, 1 repeat, no PEFT")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument(
        "--sweep",
        type=int,
        nargs="*",
        default=[8, 32, 128],
        help="tokens per agent (one row each) for the stacked / passes ratio sweep",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.sequences, args.tokens, args.no_torch = 1, 4, 32, True
        args.sweep = [8]

    import jax
    import jax.numpy as jnp

    from coevo_jax.lora import LoRAConfig, export_peft, init_lora
    from coevo_jax.models import default_model_path, load

    model, _ = load(default_model_path(), progress=False)
    params, cfg = model.params, model.config
    n_agents, b, t = 4, args.sequences, args.tokens
    lora = init_lora(
        jax.random.PRNGKey(0), LoRAConfig(n_agents=n_agents, rank=16, alpha=32, dropout=0.0), params
    )
    lora = lora.replace(params=jax.tree.map(lambda x: x + 1e-3, lora.params))
    ids = jnp.asarray(np.random.default_rng(0).integers(10, cfg.vocab_size, (b, t)), jnp.int32)
    agents = jnp.repeat(jnp.arange(n_agents), b // n_agents)

    per = b // n_agents
    contenders = stacked_vs_passes(params, cfg, lora, ids, agents)
    if not args.no_torch:
        import torch
        import transformers
        from peft import LoraConfig, get_peft_model

        path = default_model_path()
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
        )
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        lc = LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
        )
        pm = get_peft_model(hf, lc, adapter_name="agent0")
        for i in range(1, n_agents):
            pm.add_adapter(f"agent{i}", lc)
        tids = torch.from_numpy(np.asarray(ids).astype(np.int64))

        def peft_passes():
            for i in range(n_agents):
                pm.set_adapter(f"agent{i}")
                out = pm(tids[i * per : (i + 1) * per], labels=tids[i * per : (i + 1) * per])
                out.loss.backward()
                pm.zero_grad(set_to_none=True)

        contenders["peft-4-passes"] = peft_passes

    times = common.interleaved(contenders, args.repeats, warmup=1)
    med = {k: float(np.median(v)) for k, v in times.items()}

    # Where does the stacked pass pay? One row per agent, shrinking rows: each single-agent
    # pass's FLOP per byte of backbone read falls as tokens/6, until it is memory-bound.
    sweep = {}
    for tok in args.sweep:
        ids_s = jnp.asarray(
            np.random.default_rng(tok).integers(10, cfg.vocab_size, (n_agents, tok)), jnp.int32
        )
        fns = stacked_vs_passes(params, cfg, lora, ids_s, jnp.arange(n_agents, dtype=jnp.int32))
        ts = common.interleaved(fns, max(args.repeats, 3), warmup=1)
        m = {k: float(np.median(v)) for k, v in ts.items()}
        sweep[str(tok)] = {
            "stacked_s": m["jax-stacked"],
            "four_passes_s": m["jax-4-passes"],
            "ratio": m["jax-4-passes"] / m["jax-stacked"],
        }
    ratios = {"4-passes / stacked (JAX)": med["jax-4-passes"] / med["jax-stacked"]}
    if "peft-4-passes" in med:
        ratios["PEFT 4-passes / JAX stacked"] = med["peft-4-passes"] / med["jax-stacked"]

    with tempfile.TemporaryDirectory() as d:
        ts = []
        for k in range(3):
            t0 = time.perf_counter()
            out = export_peft(lora, 0, os.path.join(d, f"a{k}"), base_model="SmolLM2-135M-Instruct")
            ts.append(time.perf_counter() - t0)
        nbytes = sum(p.stat().st_size for p in out.iterdir())
    export_s = float(np.median(ts))
    n_smol = adapter_params(
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_layers,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
    )
    n_qwen = adapter_params(**QWEN3_4B)
    # Floor: fwd (2 FLOP per weight per token) + activation backward (2 more; the frozen base
    # gets no weight gradient), against reading the fp32 backbone about 3 times per call
    # (forward, and twice in the backward). FLOP per byte of one call = tokens / 6: compute
    # bound from ~a dozen tokens on a CPU (ridge ~5-10 FLOP/byte), so four passes of B/4 rows
    # cost nearly what one pass of B rows costs, and the ratio is bounded by how much better
    # XLA's matmuls run at B rows than at B/4 rows, not by the 4x fewer weight reads.
    n_weights = sum(x.size for x in jax.tree.leaves(params))
    floor = {
        "flops_per_step": 4 * n_weights * b * t,
        "weight_bytes_per_call": 3 * 4 * n_weights,
        "flop_per_byte_stacked": (4 * n_weights * b * t) / (3 * 4 * n_weights),
        "flop_per_byte_per_agent_pass": (4 * n_weights * (b // n_agents) * t) / (3 * 4 * n_weights),
    }
    floor["gflops_achieved_stacked"] = floor["flops_per_step"] / med["jax-stacked"] / 1e9
    figures = {
        **{k: {**common.summary(v), "tokens_per_s": b * t / med[k]} for k, v in times.items()},
        "export_smollm2_r16": {
            "seconds": export_s,
            "bytes": nbytes,
            "params": n_smol,
            "mb_per_s": nbytes / export_s / 1e6,
        },
        "floor": floor,
        "sweep_tokens_per_agent": sweep,
        "export_qwen3_4b_r16_projected": {
            "params": n_qwen,
            "bytes": 4 * n_qwen,
            "seconds": 4 * n_qwen / (nbytes / export_s),
        },
    }
    path = common.write_result("lora", {"config": vars(args), "figures": figures, "ratios": ratios})
    rows = [{"contender": k, "median_s": med[k], "tok/s": b * t / med[k]} for k in med]
    print(common.format_table(rows))
    for k, v in ratios.items():
        print(f"ratio {k}: {v:.2f}x")
    for tok, v in sweep.items():
        print(f"1 row x {tok} tokens per agent: 4 passes / stacked = {v['ratio']:.2f}x")
    print(
        f"floor: {floor['flops_per_step'] / 1e9:.0f} GFLOP per step, "
        f"{floor['flop_per_byte_per_agent_pass']:.0f} FLOP/byte per single-agent pass; stacked pass ran at {floor['gflops_achieved_stacked']:.0f} GFLOP/s"
    )
    print(
        f"export r=16 SmolLM2 adapter: {export_s * 1000:.0f} ms ({nbytes / 1e6:.1f} MB); "
        f"Qwen3-4B r=16 ({n_qwen / 1e6:.1f}M params) projected {figures['export_qwen3_4b_r16_projected']['seconds']:.2f} s"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
