"""One-call GPU check (a lent H200): policy step, router latency and decode on Qwen3-4B shapes.

Random bf16 weights with Qwen3-4B's shapes (36 layers, hidden 2560, GQA 32/8, vocab 151936;
no hub access is needed). It measures, in one process:

- our jitted GSPO + LoRA policy step (4 agents, r=16): completion tokens/s, MFU against
  989 TFLOP/s dense bf16 and against the matmul peak measured here;
- the same step in PyTorch (transformers + PEFT + TRL 1.16's loss) for the ratio;
- router latency per query (partial pass to layer 27 + familiarity heads) at batch 1 and 32,
  against the paper's 11.87 ms;
- decode tokens/s of the JAX sampler;
- the multi-agent LoRA goal of the LoRA issue: forward + backward of one mixed 4-agent batch
  (one row of 128 tokens per agent) against four single-agent passes, where each pass reads
  the whole bf16 backbone for 128 tokens (memory-bound on this GPU, unlike on CPU).

``--shape tiny`` runs the same code on a tiny model on CPU (the CI smoke test).
Run through ``benchmarks/gpu_check.sh``; results go to ``--out`` as JSON plus a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

H200_BF16_PEAK_TFLOPS = 989.0
PAPER_ROUTER_MS = 11.87

SHAPES = {
    "qwen3-4b": dict(
        vocab_size=151936,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
    ),
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
    ),
}
WORK = {  # sequences, prompt, completion, router query length, decode prompts, new tokens, repeats
    "qwen3-4b": dict(
        n_seq=16,
        p_len=128,
        t_len=512,
        q_len=256,
        n_prompts=16,
        new_tokens=128,
        repeats=3,
        lora_len=128,
    ),
    "tiny": dict(
        n_seq=8, p_len=8, t_len=16, q_len=16, n_prompts=4, new_tokens=8, repeats=2, lora_len=16
    ),
}


def hf_config(shape: str) -> dict[str, Any]:
    return {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "tie_word_embeddings": shape == "qwen3-4b", "eos_token_id": 1,
            **SHAPES[shape]}  # fmt: skip


def _median_time(fn, repeats: int) -> tuple[float, list[float]]:
    fn()  # compile / warm up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def jax_checks(shape: str, w: dict[str, int]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from benchmarks.bench_policy_step import make_data, step_flops
    from coevo_jax.lora import LoRAConfig, init_lora
    from coevo_jax.models import ModelConfig, init_params
    from coevo_jax.models.sampler import generate
    from coevo_jax.rl import RLConfig
    from coevo_jax.rl.logprobs import PolicyBatch
    from coevo_jax.rl.train_step import init_policy_state, make_policy_step
    from coevo_jax.router import RouterConfig, features, init_router, route

    out: dict[str, Any] = {"device": str(jax.devices()[0]), "jax": jax.__version__}
    n = 8192 if shape == "qwen3-4b" else 512
    a = jnp.ones((n, n), jnp.bfloat16)
    mm = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
    t, _ = _median_time(lambda: mm(a, a).block_until_ready(), 5)
    out["matmul_peak_tflops"] = 2 * n**3 / t / 1e12

    cfg = ModelConfig.from_hf_dict(hf_config(shape))
    params = init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.bfloat16)
    data = make_data(w["n_seq"], w["p_len"], w["t_len"], 4, vocab=cfg.vocab_size)
    lora = init_lora(
        jax.random.PRNGKey(1), LoRAConfig(n_agents=4, rank=16, alpha=32, dropout=0.05), params
    )
    rl = RLConfig(compute_dtype="bfloat16", remat=True, beta=1e-4)
    holder = {"s": init_policy_state(lora, rl, jax.random.PRNGKey(2))}
    batch = PolicyBatch(**{k: jnp.asarray(v) for k, v in data.items()})
    step = make_policy_step(cfg, rl)

    def run_step():
        holder["s"], m = step(holder["s"], params, batch)
        jax.block_until_ready(m)

    t, ts = _median_time(run_step, w["repeats"])
    n_tok = int(data["completion_mask"].sum())
    flops = step_flops(cfg, w["n_seq"], w["p_len"], w["t_len"], n_tok, 16)["total"]
    out["policy_step"] = {
        "median_s": t,
        "runs": ts,
        "tokens_per_s": n_tok / t,
        "tflops": flops / t / 1e12,
        "mfu_vs_989": flops / t / 1e12 / H200_BF16_PEAK_TFLOPS,
        "mfu_vs_measured": flops / t / 1e12 / out["matmul_peak_tflops"],
    }

    rcfg = RouterConfig(n_agents=4, max_prompt_tokens=w["q_len"])
    rstate = init_router(rcfg, 2 * cfg.hidden_size)
    out["router_ms"] = {}
    for b in (1, 32):
        ids = jax.random.randint(jax.random.PRNGKey(b), (b, w["q_len"]), 3, cfg.vocab_size)

        def run_router(ids=ids):
            h = features(params, cfg, ids, compute_dtype=jnp.bfloat16, max_len=w["q_len"])
            jax.block_until_ready(route(rstate, h, train=False).active)

        t, _ = _median_time(run_router, w["repeats"] + 2)
        out["router_ms"][str(b)] = 1000 * t / b

    from benchmarks.bench_lora import stacked_vs_passes

    lora_ids = jax.random.randint(jax.random.PRNGKey(7), (4, w["lora_len"]), 3, cfg.vocab_size)
    fns = stacked_vs_passes(
        params, cfg, lora, lora_ids, jnp.arange(4, dtype=jnp.int32), compute_dtype=jnp.bfloat16
    )
    t_stacked, _ = _median_time(fns["jax-stacked"], w["repeats"])
    t_passes, _ = _median_time(fns["jax-4-passes"], w["repeats"])
    out["lora_mixed"] = {
        "stacked_s": t_stacked,
        "four_passes_s": t_passes,
        "ratio_passes_over_stacked": t_passes / t_stacked,
    }

    prompts = [list(range(3, 3 + 32 + k)) for k in range(w["n_prompts"])]

    def run_gen(new):
        return generate(
            params,
            cfg,
            prompts,
            max_new_tokens=new,
            temperature=1.0,
            seeds=list(range(len(prompts))),
            ignore_eos=True,
            compute_dtype=jnp.bfloat16,
        )

    t_full, _ = _median_time(lambda: run_gen(w["new_tokens"]), 2)
    t_pre, _ = _median_time(lambda: run_gen(1), 2)
    new = w["n_prompts"] * (w["new_tokens"] - 1)
    out["decode_tokens_per_s"] = new / max(t_full - t_pre, 1e-9)
    out["generate_256_tokens_s"] = t_full / w["new_tokens"] * 256
    return out


def torch_check(shape: str, w: dict[str, int]) -> dict[str, Any]:
    import torch
    import transformers

    from benchmarks.bench_policy_step import make_data
    from benchmarks.torch_baseline import peft_policy_step

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    cfg = transformers.Qwen3Config(
        **{k: v for k, v in hf_config(shape).items() if k not in ("model_type", "architectures")}
    )
    with torch.device(device):
        model = transformers.Qwen3ForCausalLM(cfg).to(dtype)
    model.gradient_checkpointing_enable()
    data = make_data(w["n_seq"], w["p_len"], w["t_len"], 4, vocab=cfg.vocab_size)
    run = peft_policy_step(model, data, n_agents=4, rank=16, device=device)
    t, ts = _median_time(run, w["repeats"])
    return {
        "median_s": t,
        "runs": ts,
        "tokens_per_s": int(data["completion_mask"].sum()) / t,
        "device": device,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    w = WORK[args.shape]
    res: dict[str, Any] = {
        "shape": args.shape,
        "work": w,
        "time_utc": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
    }
    res["jax"] = jax_checks(args.shape, w)
    if not args.no_torch:
        try:
            res["torch"] = torch_check(args.shape, w)
        except ImportError as e:  # trl/peft missing on the device: report, keep the JAX figures
            res["torch"] = {"error": f"{type(e).__name__}: {e}"}
    j = res["jax"]
    rows = [
        ("policy step tokens/s (JAX)", f"{j['policy_step']['tokens_per_s']:.0f}"),
        (
            "policy step TFLOP/s, MFU vs 989",
            f"{j['policy_step']['tflops']:.1f}, {100 * j['policy_step']['mfu_vs_989']:.1f}%",
        ),
        ("measured bf16 matmul peak TFLOP/s", f"{j['matmul_peak_tflops']:.0f}"),
        (
            "router ms/query b=1, b=32 (paper 11.87)",
            f"{j['router_ms']['1']:.2f}, {j['router_ms']['32']:.2f}",
        ),
        ("decode tokens/s (JAX sampler)", f"{j['decode_tokens_per_s']:.0f}"),
        (
            "LoRA 4 passes / one mixed pass (goal 2x)",
            f"{j['lora_mixed']['ratio_passes_over_stacked']:.2f}x",
        ),
    ]
    if "tokens_per_s" in res.get("torch", {}):
        ratio = j["policy_step"]["tokens_per_s"] / res["torch"]["tokens_per_s"]
        res["policy_step_ratio_jax_over_torch"] = ratio
        rows.append(
            ("policy step tokens/s (PyTorch TRL+PEFT)", f"{res['torch']['tokens_per_s']:.0f}")
        )
        rows.append(("ratio JAX / PyTorch", f"{ratio:.2f}x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu_check-{args.shape}.json"
    path.write_text(json.dumps(res, indent=2))
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
