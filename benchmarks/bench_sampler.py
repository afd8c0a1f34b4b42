"""Sampler throughput: the JAX sampler against transformers' PyTorch ``generate``.

Same model (the SmolLM2-135M-Instruct GGUF, dequantised to fp32 by both sides), same batch
(16 chat prompts, 64 new tokens, pure sampling at temperature 1, top-p 1, EOS ignored so every
row produces exactly 64 tokens), same CPU, one process, contenders interleaved.

* prefill tokens/s = real (unpadded) prompt tokens / wall time of a 1-new-token call;
* decode tokens/s = rows * (new - 1) / (wall of the full call - wall of the 1-token call).

JAX runs with fp32 and with bf16 compute (weights cast per layer, KV cache in the compute
dtype). Run ``python -m benchmarks.bench_sampler [--quick]``; figures go to
``benchmarks/results/sampler-*.json`` and a table is printed, ratio > 1 = JAX faster.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Mapping
from typing import Any

from benchmarks import common

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain photosynthesis to a ten-year-old.",
    "Give me three tips for sleeping better.",
    "Write a Python function that reverses a string.",
    "What causes the seasons on Earth?",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "How do I make a cup of green tea?",
    "List five prime numbers greater than 20.",
    "What is the difference between a virus and a bacterium?",
    "Translate 'good morning, how are you?' into Spanish.",
    "Why is the sky blue?",
    "Suggest a name for a small bakery that sells sourdough bread.",
    "What are the main causes of inflation?",
    "Describe a cat to someone who has never seen one.",
    "How does a binary search work?",
]


def _jax_runner(params, cfg, prompts, n_new, dtype_name):
    import jax.numpy as jnp

    from coevo_jax.models.sampler import generate

    dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[dtype_name]

    def run(n):
        return generate(
            params,
            cfg,
            prompts,
            max_new_tokens=n,
            temperature=1.0,
            top_p=1.0,
            seeds=list(range(len(prompts))),
            ignore_eos=True,
            compute_dtype=dtype,
        )

    return run


def _torch_runner(model, prompts, pad_id):
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1

    def run(n):
        torch.manual_seed(0)
        with torch.inference_mode():
            return model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=pad_id,
            )

    return run


# ----------------------------------------------------------------------------- figures (run_all)


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    figs, cfg = rec["figures"], rec["config"]
    n_prompt, rows, new = cfg["prompt_tokens"], cfg["prompts"], cfg["new_tokens"]
    torch_f = figs.get("torch_fp32")
    out = []
    for kind, key in (("prefill", "prefill_tok_s"), ("decode", "decode_tok_s")):
        best = common.best_jax(figs, lambda f, key=key: f[key])
        jf = figs[best] if best else None

        def spread(f, kind=kind):
            if f is None:
                return None
            if kind == "prefill":
                return common.rate_range(n_prompt, f["prefill"])
            # decode = full call - prefill call; the range holds the prefill at its median
            pre = f["prefill"]["median_s"]
            lo_t, hi_t = f["full"]["min_s"] - pre, f["full"]["max_s"] - pre
            work = rows * (new - 1)
            return [work / hi_t, work / lo_t] if lo_t > 0 else None

        out.append(
            common.figure(
                f"sampler_{kind}_tokens_per_s",
                "tokens/s",
                jf[key] if jf else None,
                torch_f[key] if torch_f else None,
                higher_is_better=True,
                spread_jax=spread(jf),
                spread_pytorch=spread(torch_f),
                jax_variant=best,
                baseline="transformers generate",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 prompts, 16 tokens, 1 repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--dtypes", default="fp32,bf16", help="JAX compute dtypes to try")
    ap.add_argument("--no-torch", action="store_true", help="JAX only")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="1 = single-threaded JAX and PyTorch (robust on a shared, overloaded box); "
        "0 = each library's default (all cores)",
    )
    args = ap.parse_args(argv)
    if args.threads == 1:  # must precede the jax import
        os.environ["XLA_FLAGS"] = common.single_thread_xla_flags(os.environ.get("XLA_FLAGS"))
    if args.quick:
        args.repeats, args.new_tokens, args.prompts = 1, 16, 4

    import jax

    from coevo_jax.models.default import default_model_path
    from coevo_jax.models.gguf import load_gguf

    path = default_model_path()
    cfg, params, tok = load_gguf(path)
    questions = (PROMPTS * (args.prompts // len(PROMPTS) + 1))[: args.prompts]
    prompts = [tok.encode_chat([{"role": "user", "content": q}]) for q in questions]
    n_prompt_tokens = sum(len(p) for p in prompts)
    n, b = args.new_tokens, len(prompts)

    runners: dict[str, Any] = {}
    for d in args.dtypes.split(","):
        # bf16 compute gets bf16-stored weights: casting fp32 weights every step would add
        # a full extra read+write of the model per decoded token
        p = params if d == "fp32" else jax.tree.map(lambda a: a.astype("bfloat16"), params)
        runners[f"jax_{d}"] = _jax_runner(p, cfg, prompts, n, d)
    if not args.no_torch:
        import torch
        import transformers

        if args.threads:
            torch.set_num_threads(args.threads)

        model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
        ).eval()
        runners["torch_fp32"] = _torch_runner(model, prompts, tok.pad_token_id)

    fns = {}
    for name, run in runners.items():
        fns[f"{name}/prefill"] = lambda run=run: run(1)
        fns[f"{name}/full"] = lambda run=run: run(n)
    times = common.interleaved(fns, args.repeats, warmup=1)

    rows, figures = [], {}
    for name in runners:
        t_pre = statistics.median(times[f"{name}/prefill"])
        t_full = statistics.median(times[f"{name}/full"])
        t_dec = max(t_full - t_pre, 1e-9)
        figures[name] = {
            "prefill": common.summary(times[f"{name}/prefill"]),
            "full": common.summary(times[f"{name}/full"]),
            "prefill_tok_s": n_prompt_tokens / t_pre,
            "decode_tok_s": b * (n - 1) / t_dec,
            "end_to_end_tok_s": b * n / t_full,
        }
        rows.append(
            {
                "contender": name,
                "prefill tok/s": figures[name]["prefill_tok_s"],
                "decode tok/s": figures[name]["decode_tok_s"],
                "total s": t_full,
            }
        )
    ratios = {}
    if "torch_fp32" in figures:
        ref = figures["torch_fp32"]
        for name in runners:
            if name.startswith("jax_"):
                ratios[name] = {
                    "prefill": figures[name]["prefill_tok_s"] / ref["prefill_tok_s"],
                    "decode": figures[name]["decode_tok_s"] / ref["decode_tok_s"],
                    "end_to_end": figures[name]["end_to_end_tok_s"] / ref["end_to_end_tok_s"],
                }
                row = next(r for r in rows if r["contender"] == name)
                row["decode ratio vs torch"] = ratios[name]["decode"]
                row["prefill ratio vs torch"] = ratios[name]["prefill"]
    config = {
        "model": os.path.basename(path),
        "prompts": b,
        "prompt_tokens": n_prompt_tokens,
        "max_prompt_len": max(len(p) for p in prompts),
        "new_tokens": n,
        "repeats": args.repeats,
        "sampling": "temperature 1, top_p 1, EOS ignored",
        "jax_backend": jax.default_backend(),
        "threads": args.threads or "default",
    }
    out = common.write_result("sampler", {"config": config, "figures": figures, "ratios": ratios})
    print(common.format_table(rows))
    for name, r in ratios.items():
        print(
            f"{name}: decode {r['decode']:.2f}x, prefill {r['prefill']:.2f}x PyTorch (>1 = JAX faster)"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
