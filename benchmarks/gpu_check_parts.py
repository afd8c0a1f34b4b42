"""The parts of the GPU check (``benchmarks/gpu_check.py``), one per process.

``python -m benchmarks.gpu_check_parts PART --shape SHAPE --record FILE --time-limit-s S``
runs one part and writes its figures to ``FILE`` as JSON. The record is rewritten at every
stage (``stage``: init, lower, compile, warmup, steps, done), so a part that the runner stops
at its time limit still leaves what it had measured and where it stopped. Parts:

- ``policy_step``: the jitted GSPO + LoRA policy step (``rl.train_step.make_policy_step``),
  lowered and compiled ahead of time (each timed apart), then one warm-up call and as many
  timed steps as fit the part's time (at most ``repeats``). Completion tokens/s; FLOPs from
  the compiled program and the analytic ``6 N tokens`` + attention count; MFU against the
  device's dense bf16 peak; ``memory_analysis()`` and the device's ``peak_bytes_in_use``.
- ``router``: the router's partial pass (``router.features``) plus the familiarity heads
  (``router.route``, inference ranking) per query, at batch 1 and 32.
- ``lora_stacked``: gradients w.r.t. the adapters of the completion log-likelihood of one
  mixed 4-agent batch, against four single-agent calls on each agent's rows.
- ``torch_policy_step``: ``benchmarks.gpu_check_torch`` (transformers + PEFT + TRL's loss).

The model is random bf16 weights with Qwen3-4B's shapes (``--shape qwen3-4b``; no hub
access) or a tiny Qwen3 (``--shape tiny``, the CPU smoke test), 4 LoRA agents. The RL,
LoRA and router settings are the ``rl``, ``lora`` and ``router`` sections of the bundled
``paper_homogeneous.yaml``, loaded by the project's config loader with the overrides of
:data:`OVERRIDES` and ``--set`` applied as a user's command-line overrides are: the memory
levers (``rl.logprob_chunk``, ``rl.attention``, ``rl.remat``) are the paper config's own.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PAPER_CONFIG = "paper_homogeneous"
PAPER_ROUTER_MS = 11.87
# Dense bf16 peak (TFLOP/s, no sparsity) by a substring of jax's device_kind.
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "GH200": 989.0, "A100": 312.0}

SHAPES: dict[str, dict[str, Any]] = {
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

# rows: policy-step rows (4 agents x rows/4); rows_per_micro: rows per micro-batch;
# prompt / completion: tokens per row; query: router query tokens; lora_rows: rows per agent
# of the stacked-LoRA part; repeats: most timed calls per measurement.
WORK: dict[str, dict[str, int]] = {
    # 64 rows = one GPU's share of the paper's 512-row step on 8 GPUs; 16 rows per
    # micro-batch keeps the compiled step's temporaries well inside one 80 GB GPU
    # (benchmarks/README.md, "On a GPU").
    "qwen3-4b": dict(
        rows=64, rows_per_micro=16, prompt=800, completion=1000, query=800, lora_rows=1, repeats=3
    ),
    "tiny": dict(
        rows=8, rows_per_micro=4, prompt=8, completion=16, query=16, lora_rows=1, repeats=2
    ),
}

# Overrides of the paper config for one process on one device, as `--set` would give them.
# length_buckets=1: each completion width is its own compiled program, and one compile of
# the 4B step already takes a good part of the time budget.
OVERRIDES: dict[str, list[str]] = {
    "qwen3-4b": ["rl.length_buckets=1"],
    # The same levers at a scale the tiny model can show: 2 log-prob chunks, 3 attention tiles.
    "tiny": ["rl.length_buckets=1", "rl.logprob_chunk=8", "rl.attention_block=8"],
}
N_AGENTS = 4


# ----------------------------------------------------------------------------- records


class Record:
    """A part's JSON result at ``path``, rewritten whole at every change (write, then rename)
    so that a process killed at any moment leaves the last complete version."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.data: dict[str, Any] = {"stage": "start"}
        self.save()

    def stage(self, name: str) -> None:
        self.update(stage=name)

    def update(self, **values: Any) -> None:
        self.data.update(values)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=float), encoding="utf-8")
        tmp.replace(self.path)


class Clock:
    """Seconds left of a part's time limit, counted from construction."""

    def __init__(self, limit_s: float):
        self.end = time.monotonic() + limit_s

    def left(self) -> float:
        return self.end - time.monotonic()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def timed_runs(fn: Callable[[], Any], clock: Clock, most: int) -> list[float]:
    """Wall times of up to ``most`` calls of ``fn``; at least one, and no further call once
    the time left is under 1.5x the slowest so far (the part must end inside its limit)."""
    times: list[float] = []
    while len(times) < most and (not times or clock.left() > 1.5 * max(times)):
        times.append(timed(fn)[0])
    return times


def summary(times: list[float]) -> dict[str, Any]:
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "runs": len(times),
        "times_s": times,
    }


# ----------------------------------------------------------------------------- configs


def hf_config(shape: str) -> dict[str, Any]:
    """The HF ``config.json`` dict of a random model of ``shape`` (Qwen3-4B ties embeddings)."""
    return {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "tie_word_embeddings": shape == "qwen3-4b", "eos_token_id": 1,
            **SHAPES[shape]}  # fmt: skip


def paper_sections(shape: str, overrides: list[str]) -> dict[str, Any]:
    """The paper config's ``rl``, ``lora`` and ``router`` sections after :data:`OVERRIDES`
    and ``overrides`` (``section.key=value``), as plain dicts."""
    import yaml

    from coevo_jax._config import apply_overrides, resolve_config

    data = yaml.safe_load(resolve_config(PAPER_CONFIG).read_text(encoding="utf-8"))
    keep = {k: data[k] for k in ("rl", "lora", "router")}
    return apply_overrides(keep, OVERRIDES[shape] + list(overrides))


def configs(shape: str, overrides: list[str]) -> tuple[Any, Any, Any, Any]:
    """``(model, rl, lora, router)`` configs, each section checked by the config loader."""
    from coevo_jax._config import from_dict
    from coevo_jax.lora import LoRAConfig
    from coevo_jax.models import ModelConfig
    from coevo_jax.rl import RLConfig
    from coevo_jax.router import RouterConfig

    w = WORK[shape]
    sec = paper_sections(shape, overrides)
    if not any(o.startswith("rl.micro_batches=") for o in overrides):
        sec["rl"]["micro_batches"] = w["rows"] // w["rows_per_micro"]
    sec["router"]["max_prompt_tokens"] = w["query"]
    rl = from_dict(RLConfig, sec["rl"], path="rl")
    lora = from_dict(LoRAConfig, sec["lora"], path="lora")
    router = from_dict(RouterConfig, sec["router"], path="router")
    return ModelConfig.from_hf_dict(hf_config(shape)), rl, lora, router


def device_info() -> dict[str, Any]:
    """Platform, device kind, its dense bf16 peak (None when unknown, e.g. a CPU) and memory."""
    import jax

    d = jax.devices()[0]
    kind = getattr(d, "device_kind", str(d))
    peak = peak_bf16_tflops(kind) if d.platform == "gpu" else None
    stats = _memory_stats()
    return {
        "platform": d.platform,
        "kind": kind,
        "count": jax.device_count(),
        "peak_bf16_tflops": peak,
        "memory_bytes": stats.get("bytes_limit"),
        "jax": jax.__version__,
    }


def peak_bf16_tflops(kind: str) -> float | None:
    """The dense bf16 peak of a GPU named ``kind`` (None when not in the table)."""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind.upper()), None)


def _memory_stats() -> dict[str, Any]:
    import jax

    try:
        return dict(jax.devices()[0].memory_stats() or {})
    except (AttributeError, NotImplementedError, RuntimeError):
        return {}


def device_memory() -> dict[str, Any]:
    """The allocator's ``peak_bytes_in_use`` and ``bytes_limit`` (None where not reported)."""
    s = _memory_stats()
    return {"peak_bytes_in_use": s.get("peak_bytes_in_use"), "bytes_limit": s.get("bytes_limit")}


# ----------------------------------------------------------------------------- FLOPs


def analytic_flops(cfg: Any, rows: int, prompt: int, completion: int) -> float:
    """``6 N tokens`` + attention for one policy step, in FLOPs.

    N is the decoder's projection weights (embeddings excluded) over all ``rows x (prompt +
    completion)`` tokens, plus the LM head (``hidden x vocab``) over the completion positions,
    the only ones the step projects. Attention is PaLM's count, ``12 L heads head_dim S`` per
    token (scores and values, forward and backward, no causal halving). With a frozen
    backbone ``6 N`` is exactly the step's model work: the reference forward (2N), the policy
    forward (2N) and the backward's input gradients (2N); remat's recomputation is left out,
    as MFU leaves it out. The adapters' own FLOPs (< 1 % at r = 16) are left out too.
    """
    h, d, layers = cfg.hidden_size, cfg.head_dim, cfg.num_layers
    q, kv = cfg.num_heads * d, cfg.num_kv_heads * d
    n_layers = layers * (h * q + 2 * h * kv + q * h + 3 * h * cfg.intermediate_size)
    s = prompt + completion
    tokens = rows * s
    attention = 12 * layers * cfg.num_heads * d * s * tokens
    head = 6 * h * cfg.vocab_size * rows * completion
    return float(6 * n_layers * tokens + attention + head)


def compiled_flops(compiled: Any) -> dict[str, Any]:
    """FLOPs of one call of a compiled program: XLA's ``cost_analysis()`` and, where
    ``coevo_jax.train.plan_hlo`` is present, the HLO's matmul FLOPs with every loop body
    counted its trip count times (``cost_analysis()`` counts a scanned body once, so it
    understates a step that scans layers, micro-batches and log-prob chunks)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older JAX: one dict per program
        cost = cost[0] if cost else {}
    out: dict[str, Any] = {"xla_cost_analysis": float((cost or {}).get("flops", 0.0)) or None}
    try:
        from coevo_jax.train.plan_hlo import hlo_costs
    except ImportError:
        out["trip_weighted"] = None
        return out
    costs = hlo_costs(compiled.as_text())
    out["trip_weighted"] = float(costs["flops"])
    out["unknown_trip_loops"] = int(costs["unknown_trip_loops"])
    return out


def memory_analysis(compiled: Any) -> dict[str, Any]:
    """The compiled program's ``memory_analysis()`` in bytes (None where unavailable)."""
    m = compiled.memory_analysis()
    names = ("argument", "output", "temp", "alias", "generated_code")
    return {f"{n}_bytes": _int_or_none(getattr(m, f"{n}_size_in_bytes", None)) for n in names}


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def mfu(flops: float | None, seconds: float, peak_tflops: float | None) -> float | None:
    if not flops or not peak_tflops or seconds <= 0:
        return None
    return flops / seconds / (peak_tflops * 1e12)


def matmul_peak_tflops(shape: str) -> float:
    """bf16 matmul rate measured here (median of 5 after a warm-up), TFLOP/s."""
    import jax
    import jax.numpy as jnp

    n = 8192 if shape == "qwen3-4b" else 256
    a = jnp.ones((n, n), jnp.bfloat16)
    mm = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
    mm(a, a).block_until_ready()
    times = [timed(lambda: mm(a, a).block_until_ready())[0] for _ in range(5)]
    return 2 * n**3 / statistics.median(times) / 1e12


# ----------------------------------------------------------------------------- JAX parts


def _backbone(shape: str, cfg: Any) -> Any:
    import jax
    import jax.numpy as jnp

    from coevo_jax.models import init_params

    return jax.block_until_ready(init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.bfloat16))


def _batch(shape: str, cfg: Any, rows: int, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """A :class:`PolicyBatch` of ``rows`` (agents in equal, contiguous blocks) and its numpy
    source (``bench_policy_step.make_data``: every other completion stops at 3/4 length)."""
    import jax.numpy as jnp

    from benchmarks.bench_policy_step import make_data
    from coevo_jax.rl.logprobs import PolicyBatch

    w = WORK[shape]
    data = make_data(rows, w["prompt"], w["completion"], N_AGENTS, cfg.vocab_size, seed=seed)
    return PolicyBatch(**{k: jnp.asarray(v) for k, v in data.items()}), data


# The RLConfig fields a policy-step record repeats: the memory levers and what sizes the step.
RL_FIELDS = ("micro_batches", "remat", "logprob_chunk", "attention", "attention_block",
             "compute_dtype", "length_buckets")  # fmt: skip


def _compile_policy_step(cfg: Any, rl: Any, state: Any, params: Any, batch: Any, rec: Record):
    """Lowers, then compiles the policy step, timing each apart; records both times, the
    compiled ``memory_analysis()`` and its FLOPs. Returns the compiled step."""
    from coevo_jax.rl.train_step import make_policy_step

    rec.stage("lower")
    lower_s, lowered = timed(lambda: make_policy_step(cfg, rl).lower(state, params, batch))
    rec.update(compile={"lower_s": lower_s, "compile_s": None})
    rec.stage("compile")
    compile_s, compiled = timed(lowered.compile)
    rec.update(
        compile={"lower_s": lower_s, "compile_s": compile_s},
        memory_analysis=memory_analysis(compiled),
        flops=compiled_flops(compiled),
    )
    return compiled


def _step_rates(rec: Record, times: list[float], n_tok: int) -> dict[str, Any]:
    """Tokens/s, TFLOP/s and MFU of the median step from the record's FLOP counts. The
    compiled count is the trip-weighted one only: XLA's own counts each loop body once."""
    t = statistics.median(times)
    flops, peak = rec.data["flops"], rec.data["device"]["peak_bf16_tflops"]
    compiled, analytic = flops["trip_weighted"], flops["analytic_6nt"]
    return {
        "steps": summary(times),
        "tokens_per_s": n_tok / t,
        "tflops_compiled": compiled / t / 1e12 if compiled else None,
        "tflops_analytic": analytic / t / 1e12,
        "mfu_compiled": mfu(compiled, t, peak),
        "mfu_analytic": mfu(analytic, t, peak),
        "mfu_analytic_vs_measured_matmul": analytic / t / 1e12 / rec.data["matmul_peak_tflops"],
    }


def part_policy_step(shape: str, overrides: list[str], rec: Record, clock: Clock) -> None:
    import jax

    from benchmarks.bench_policy_step import step_flops
    from coevo_jax.lora import init_lora
    from coevo_jax.models.ops import resolve_attention
    from coevo_jax.rl.train_step import init_policy_state

    cfg, rl, lora_cfg, _ = configs(shape, overrides)
    w = WORK[shape]
    rec.update(device=device_info(), rl={k: getattr(rl, k) for k in RL_FIELDS},
               attention_resolved=resolve_attention(rl.attention), rows=w["rows"],
               rows_per_micro_batch=w["rows"] // rl.micro_batches)  # fmt: skip
    rec.stage("init")
    params = _backbone(shape, cfg)
    lora = init_lora(jax.random.PRNGKey(1), lora_cfg, params)
    state = init_policy_state(lora, rl, jax.random.PRNGKey(2))
    batch, data = _batch(shape, cfg, w["rows"])
    n_tok = int(data["completion_mask"].sum())
    rec.update(matmul_peak_tflops=matmul_peak_tflops(shape), completion_tokens=n_tok)
    compiled = _compile_policy_step(cfg, rl, state, params, batch, rec)
    rec.data["flops"]["analytic_6nt"] = analytic_flops(cfg, w["rows"], w["prompt"], w["completion"])
    rec.data["flops"]["bench_step_flops"] = step_flops(
        cfg, w["rows"], w["prompt"], w["completion"], n_tok, lora_cfg.rank
    )["total"]
    holder = [state]  # the step donates its state: each call takes the last one's

    def run() -> None:
        holder[0], metrics = compiled(holder[0], params, batch)
        jax.block_until_ready(metrics)

    rec.stage("warmup")
    rec.update(first_call_s=timed(run)[0])
    rec.stage("steps")
    times = timed_runs(run, clock, w["repeats"])
    rec.update(**_step_rates(rec, times, n_tok), device_memory=device_memory())
    rec.stage("done")


def part_router(shape: str, overrides: list[str], rec: Record, clock: Clock) -> None:
    import jax
    import jax.numpy as jnp

    from coevo_jax.router import feature_dim, features, init_router, route

    cfg, _, _, rcfg = configs(shape, overrides)
    w = WORK[shape]
    rec.update(device=device_info(), query_tokens=w["query"], paper_ms=PAPER_ROUTER_MS)
    rec.stage("init")
    params = _backbone(shape, cfg)
    rstate = init_router(rcfg, feature_dim(cfg.hidden_size, rcfg.feature_layers))
    results: dict[str, Any] = {}
    for b in (1, 32):
        ids = jax.random.randint(jax.random.PRNGKey(b), (b, w["query"]), 3, cfg.vocab_size)

        def run(ids=ids) -> None:
            h = features(
                params,
                cfg,
                ids,
                layers=rcfg.feature_layers,
                max_len=w["query"],
                compute_dtype=jnp.bfloat16,
            )
            jax.block_until_ready(route(rstate, h, train=False).active)

        rec.stage(f"batch {b}")
        first = timed(run)[0]
        times = timed_runs(run, clock, w["repeats"] + 2)
        ms = 1000 * statistics.median(times) / b
        results[str(b)] = {"first_call_s": first, "ms_per_query": ms, **summary(times)}
        rec.update(batches=results)
    rec.update(
        ms_per_query_b1=results["1"]["ms_per_query"],
        ms_per_query_b32=results["32"]["ms_per_query"],
        device_memory=device_memory(),
    )
    rec.stage("done")


def part_lora_stacked(shape: str, overrides: list[str], rec: Record, clock: Clock) -> None:
    import jax
    import jax.numpy as jnp

    from coevo_jax.lora import init_lora
    from coevo_jax.rl.logprobs import sequence_logprobs

    cfg, rl, lora_cfg, _ = configs(shape, overrides)
    w = WORK[shape]
    rows = N_AGENTS * w["lora_rows"]
    rec.update(device=device_info(), rows=rows, tokens_per_row=w["prompt"] + w["completion"])
    rec.stage("init")
    params = _backbone(shape, cfg)
    lora = init_lora(jax.random.PRNGKey(1), lora_cfg, params)
    batch, _ = _batch(shape, cfg, rows, seed=1)
    dtype = jnp.dtype(rl.compute_dtype)

    @jax.jit
    def grads(lp, base, b):
        # The policy's own forward (levers included); the backbone is an argument so that
        # it is not baked into the program as a constant.
        def nll(lp):
            logp, _ = sequence_logprobs(
                base,
                cfg,
                lora.replace(params=lp),
                b,
                compute_dtype=dtype,
                remat=rl.remat,
                chunk_size=rl.logprob_chunk,
                with_entropy=False,
                attention=rl.attention,
                attention_block=rl.attention_block,
            )
            m = b.completion_mask
            return -(logp * m).sum() / m.sum()

        return jax.grad(nll)(lp)

    per = w["lora_rows"]
    parts = [
        jax.tree.map(lambda x, i=i: x[i * per : (i + 1) * per], batch) for i in range(N_AGENTS)
    ]
    fns = {
        "stacked": lambda: jax.block_until_ready(grads(lora.params, params, batch)),
        "four_passes": lambda: [
            jax.block_until_ready(grads(lora.params, params, p)) for p in parts
        ],
    }
    out: dict[str, Any] = {}
    for name, fn in fns.items():
        rec.stage(f"{name} first call")
        out[name] = {"first_call_s": timed(fn)[0]}
        rec.update(**out)
    rec.stage("timed")
    for name, fn in fns.items():
        out[name].update(summary(timed_runs(fn, clock, w["repeats"])))
    rec.update(
        **out,
        ratio_passes_over_stacked=out["four_passes"]["median_s"] / out["stacked"]["median_s"],
        device_memory=device_memory(),
    )
    rec.stage("done")


def part_torch_policy_step(shape: str, overrides: list[str], rec: Record, clock: Clock) -> None:
    from benchmarks.gpu_check_torch import torch_policy_step

    torch_policy_step(shape, rec, clock)


PARTS: dict[str, Callable[[str, list[str], Record, Clock], None]] = {
    "policy_step": part_policy_step,
    "router": part_router,
    "torch_policy_step": part_torch_policy_step,
    "lora_stacked": part_lora_stacked,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=list(PARTS))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    ap.add_argument("--record", required=True, help="JSON file the part writes")
    ap.add_argument("--time-limit-s", type=float, default=math.inf)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override of the paper config's rl/lora/router sections",
    )
    args = ap.parse_args(argv)
    # Leave a margin for the runner's bookkeeping: stop timing before the limit.
    clock = Clock(max(0.8 * args.time_limit_s, args.time_limit_s - 15.0))
    rec = Record(args.record)
    PARTS[args.part](args.shape, args.set, rec, clock)
    print(json.dumps({k: v for k, v in rec.data.items() if not isinstance(v, dict)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
