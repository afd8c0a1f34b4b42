"""The HTTP protocol's cost: HTTP engine vs in-process engine tokens/s on the same batch.

    python -m benchmarks.bench_bridge [--quick]

One batch = 8 prompts x n=2 samples, 64 new tokens, temperature 1, fixed seeds, the prompts
split between two agents whose rank-16 adapters are published on both sides. Three
contenders, timed interleaved in one process:

- ``sampler``: ``coevo_jax.models.sampler.generate`` on the 16 rows in one call, the floor
  (generation itself, no engine, no protocol);
- ``in_process``: ``rollout_bridge.local_engine.InProcessEngine.generate`` on the requests;
- ``http``: ``rollout_bridge.http_engine.HTTPEngine.generate`` on the same requests, against
  ``rollout_bridge.server`` started by the launcher in a child process (same weights: the
  embedded SmolLM2-135M-Instruct by default, a random 2-layer Llama in ``--quick``).

The two engines seed rows differently (the protocol carries one seed per call), so their
samples and token counts differ a little; rates are completion tokens over wall time. There is
no PyTorch counterpart: the figure is a ratio of our own two paths (in-process / HTTP, > 1 =
the protocol costs). Writes ``benchmarks/results/bridge-*.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import common

QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "Why is the sky blue? Answer in one sentence.",
    "Write a haiku about autumn leaves.",
    "What is 12 plus 7?",
    "Give a synonym for happy.",
    "Which planet is closest to the sun?",
    "Translate 'good morning' into Spanish.",
)


def generation_gflop(cfg, rows: int, prompt_len: int, steps: int, rank: int) -> float:
    """Matmul GFLOP of one sampler call as the sampler runs it: ``rows`` (bucketed) rows, the
    left-padded prompt of ``prompt_len`` through every layer with the LM head on the last
    position, then ``steps - 1`` decode positions per row (finished rows keep computing until
    the last row stops), LoRA of rank ``rank`` on all seven projections. Attention scores are
    left out (under 2 % at these lengths)."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    dims = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
    per_layer = sum(a * b + rank * (a + b) for a, b in dims)
    positions = rows * (prompt_len + steps - 1)
    return 2e-9 * (cfg.num_layers * per_layer * positions + v * h * rows * steps)


# ----------------------------------------------------------------------------- figures (run_all)


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = rec["figures"]
    inp, http = f["in_process"], f["http"]
    return [
        common.figure(
            "bridge_http_vs_in_process_tokens_per_s",
            "tokens/s",
            http["tokens_per_s"],
            inp["tokens_per_s"],
            higher_is_better=True,
            spread_jax=common.rate_range(http["completion_tokens"], http),
            spread_pytorch=common.rate_range(inp["completion_tokens"], inp),
            note="the same batch through the HTTP engine + local server vs the in-process "
            "engine (ratio < 1 is the protocol's cost)",
            baseline="in-process engine (JAX)",
        )
    ]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="random 2-layer model, 7 repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=2, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--server-timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 7

    import httpx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from coevo_jax.lora import LoRAConfig, init_lora, unstack
    from coevo_jax.models.sampler import generate as sample
    from rollout_bridge.engine import GenerationRequest
    from rollout_bridge.http_engine import HTTPEngine
    from rollout_bridge.launcher import free_port, local_command, start_server
    from rollout_bridge.local_engine import InProcessEngine, row_seed

    work = Path(tempfile.mkdtemp(prefix="bench_bridge-"))
    params, cfg, tok, model_desc, server_kw = common.served_model(args.quick, work)
    if tok is None:
        rng = np.random.default_rng(0)
        prompts = [
            tuple(int(t) for t in rng.integers(2, cfg.vocab_size, size=int(rng.integers(5, 13))))
            for _ in range(args.prompts)
        ]
        eos, pad = tuple(cfg.eos_token_ids), 0
    else:
        prompts = [tuple(tok.encode(QUESTIONS[i % len(QUESTIONS)])) for i in range(args.prompts)]
        eos = tuple(tok.eos_token_ids or cfg.eos_token_ids)  # what the server stops on
        pad = int(tok.pad_token_id or 0)

    lora = init_lora(
        jax.random.key(1),
        LoRAConfig(n_agents=2, rank=args.rank, alpha=2.0 * args.rank, dropout=0.0),
        params,
    )
    # Small non-zero B: the adapters change the samples without wrecking the model.
    lora = lora.replace(
        params=jax.tree.map(
            lambda x: 0.02 * jax.random.normal(jax.random.key(2), x.shape), lora.params
        )
    )
    requests = [
        GenerationRequest(
            prompt_ids=p,
            agent_id=i % 2,
            n=args.n,
            max_tokens=args.max_tokens,
            temperature=1.0,
            seed=1000 + i,
            query_id=f"q{i}",
        )
        for i, p in enumerate(prompts)
    ]
    rows = [(r, j) for r in requests for j in range(r.n)]

    local = InProcessEngine(params, cfg, lora, eos_ids=eos, pad_id=pad)
    for a in range(2):
        local.publish(a, unstack(lora, a), 1)

    port = free_port()
    argv_, env = local_command(
        agents=2, max_lora_rank=args.rank, port=port, served_model_name="base", **server_kw
    )
    log = open(work / "server.log", "w")
    handle = start_server(
        argv_, env, f"http://127.0.0.1:{port}", timeout=args.server_timeout, log=log
    )
    tokens: dict[str, list[int]] = {"sampler": [], "in_process": [], "http": []}
    try:
        http = HTTPEngine(handle.url, base_model="base", adapter_dir=work / "adapters", eos_ids=eos)
        for a in range(2):
            http.publish(a, unstack(lora, a), 1)

        steps = []

        def run_sampler():
            res = sample(
                params,
                cfg,
                [list(r.prompt_ids) for r, _ in rows],
                max_new_tokens=args.max_tokens,
                temperature=1.0,
                seeds=[row_seed(r.seed, j) for r, j in rows],
                stop_ids=eos,
                lora=(local.lora, jnp.asarray([r.agent_id for r, _ in rows], jnp.int32)),
                pad_id=pad,
            )
            tokens["sampler"].append(sum(len(t) for t in res.tokens))
            steps.append(max(len(t) for t in res.tokens))

        def run_engine(name, eng):
            def fn():
                trajs = eng.generate(requests)
                assert len(trajs) == len(rows), (name, len(trajs))
                tokens[name].append(sum(len(t.completion_ids) for t in trajs))

            return fn

        def server_counts() -> tuple[int, int]:
            text = httpx.get(handle.url + "/metrics", timeout=30).text
            vals = dict(line.split() for line in text.splitlines() if line)
            return int(vals["coevo:completion_calls_total"]), int(
                vals["coevo:sampler_batches_total"]
            )

        calls0, batches0 = server_counts()
        times = common.interleaved(
            {
                "sampler": run_sampler,
                "in_process": run_engine("in_process", local),
                "http": run_engine("http", http),
            },
            args.repeats,
            warmup=1,
        )
        calls1, batches1 = server_counts()
        http.close()
    finally:
        handle.stop()
        log.close()

    figures: dict = {}
    for name, ts in times.items():
        toks = tokens[name][-1]  # fixed seeds: every repeat samples the same tokens
        s = common.summary(ts)
        figures[name] = {**s, "completion_tokens": toks, "tokens_per_s": toks / s["median_s"]}
    from coevo_jax.models.sampler import bucket, prompt_bucket

    gflop = generation_gflop(
        cfg,
        bucket(len(rows), 8),
        prompt_bucket(max(len(r.prompt_ids) for r in requests)),
        steps[-1],
        args.rank,
    )
    figures["floor_gflop"] = gflop  # the in-process batch: one sampler call of all rows
    figures["sampler_gflop_per_s"] = gflop / figures["sampler"]["median_s"]
    figures["ratio_in_process_over_http_min"] = (
        figures["http"]["min_s"] / figures["in_process"]["min_s"]
    ) * (figures["in_process"]["completion_tokens"] / figures["http"]["completion_tokens"])
    t_in, t_http = figures["in_process"]["median_s"], figures["http"]["median_s"]
    figures["ratio_in_process_over_http"] = (
        figures["in_process"]["tokens_per_s"] / figures["http"]["tokens_per_s"]
    )
    figures["http_overhead_ms_per_request"] = 1e3 * (t_http - t_in) / len(requests)
    figures["in_process_overhead_ms_per_request"] = (
        1e3 * (t_in - figures["sampler"]["median_s"]) / len(requests)
    )
    rounds = args.repeats + 1  # timed repeats + the warm-up
    figures["http_calls_per_generate"] = (calls1 - calls0) / rounds  # one per agent
    figures["server_sampler_batches_per_generate"] = (batches1 - batches0) / rounds
    config = {
        "model": model_desc,
        "prompts": len(requests),
        "n": args.n,
        "rows": len(rows),
        "max_tokens": args.max_tokens,
        "temperature": 1.0,
        "agents": 2,
        "rank": args.rank,
        "repeats": args.repeats,
        "quick": args.quick,
        "server": "rollout_bridge.server (local, JAX) in a child process",
    }
    out = common.write_result("bridge", {"config": config, "figures": figures})
    table = [
        {
            "contender": name,
            "median s": figures[name]["median_s"],
            "min s": figures[name]["min_s"],
            "max s": figures[name]["max_s"],
            "tokens": figures[name]["completion_tokens"],
            "tok/s": figures[name]["tokens_per_s"],
        }
        for name in ("sampler", "in_process", "http")
    ]
    print(common.format_table(table))
    print(
        f"in-process / HTTP tok/s: {figures['ratio_in_process_over_http']:.3f}; "
        f"HTTP overhead {figures['http_overhead_ms_per_request']:.1f} ms per request "
        f"({len(requests)} requests, {len(rows)} rows); per generate: "
        f"{figures['http_calls_per_generate']:.0f} HTTP calls, "
        f"{figures['server_sampler_batches_per_generate']:.0f} server sampler batch(es)"
    )
    print(
        f"floor: {gflop:.1f} GFLOP per batch ({steps[-1]} decode steps x {len(rows)} rows), "
        f"sampler {figures['sampler_gflop_per_s']:.1f} GFLOP/s; ratio on fastest repeats "
        f"{figures['ratio_in_process_over_http_min']:.3f}"
    )
    print(f"wrote {out}")
    shutil.rmtree(work, ignore_errors=True)
    return {"config": config, "figures": figures, "path": str(out)}


if __name__ == "__main__":
    main()
