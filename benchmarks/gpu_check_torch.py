"""The PyTorch part of the GPU check: the same policy step in transformers + PEFT + TRL.

``benchmarks.torch_baseline.peft_policy_step`` at the JAX part's shapes and rows: a random
``Qwen3ForCausalLM`` (bf16 on CUDA, fp32 on CPU), 4 named PEFT adapters (r = 16, all seven
projections) trained one agent's rows at a time, TRL 1.16's GSPO loss with the reference
pass, gradient checkpointing as ``GRPOTrainer`` sets it up (the counterpart of the paper
config's ``rl.remat: full``). At the paper's shapes it needs torch with CUDA and is skipped
(with the reason) without it; ``--shape tiny`` runs on the CPU, the smoke test's path.
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

from benchmarks.gpu_check_parts import (
    N_AGENTS,
    WORK,
    Clock,
    Record,
    analytic_flops,
    hf_config,
    mfu,
    peak_bf16_tflops,
    summary,
    timed,
    timed_runs,
)


def missing_packages() -> list[str]:
    """The packages of the PyTorch side that are not installed (checked without importing)."""
    return [m for m in ("torch", "transformers", "peft", "trl") if not importlib.util.find_spec(m)]


def _model(shape: str, device: str) -> Any:
    """A random ``Qwen3ForCausalLM`` of ``shape``, built in place on ``device``."""
    import torch
    import transformers

    hf = {k: v for k, v in hf_config(shape).items() if k not in ("model_type", "architectures")}
    cfg = transformers.Qwen3Config(**hf)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # no fp32 copy of the 4B weights on the way
    try:
        with torch.device(device):
            return transformers.Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(before)


def _device_info(torch: Any, device: str) -> dict[str, Any]:
    if device != "cuda":
        return {"platform": "cpu", "kind": "cpu", "peak_bf16_tflops": None}
    kind = torch.cuda.get_device_name(0)
    return {
        "platform": "gpu",
        "kind": kind,
        "peak_bf16_tflops": peak_bf16_tflops(kind),
        "torch": torch.__version__,
    }


def torch_policy_step(shape: str, rec: Record, clock: Clock) -> None:
    """Measures the PyTorch step into ``rec``; sets ``skipped`` (and returns) when the
    PyTorch side cannot run here."""
    missing = missing_packages()
    if missing:
        rec.update(skipped=f"not installed: {', '.join(missing)}")
        return
    import torch

    from benchmarks.bench_policy_step import make_data
    from benchmarks.torch_baseline import peft_policy_step

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if shape != "tiny" and device != "cuda":
        rec.update(skipped="torch has no CUDA device; the paper's shapes need one")
        return
    if device == "cpu":
        # Tiny figures mean nothing; one thread spares the smoke test OpenMP's spin-waits,
        # which stall a step for seconds on a shared, oversubscribed CPU.
        torch.set_num_threads(1)
    w = WORK[shape]
    dev = _device_info(torch, device)
    rec.update(device=dev, rows=w["rows"])
    rec.stage("init")
    model = _model(shape, device)
    data = make_data(w["rows"], w["prompt"], w["completion"], N_AGENTS, model.config.vocab_size)
    run = peft_policy_step(
        model,
        data,
        n_agents=N_AGENTS,
        rank=16,
        device=device,
        autocast=torch.bfloat16 if device == "cuda" else None,
        gradient_checkpointing=True,
    )
    rec.stage("warmup")
    rec.update(first_call_s=timed(run)[0])
    rec.stage("steps")
    times = timed_runs(run, clock, w["repeats"])
    t = statistics.median(times)
    n_tok = int(data["completion_mask"].sum())
    flops = analytic_flops(_jax_free_config(shape), w["rows"], w["prompt"], w["completion"])
    peak_mem = torch.cuda.max_memory_allocated() if device == "cuda" else None
    rec.update(
        steps=summary(times),
        completion_tokens=n_tok,
        tokens_per_s=n_tok / t,
        mfu_analytic=mfu(flops, t, dev["peak_bf16_tflops"]),
        device_memory={"peak_bytes_in_use": peak_mem, "bytes_limit": None},
    )
    rec.stage("done")


class _Shape:
    """The fields of ``ModelConfig`` that :func:`analytic_flops` reads, from the HF dict
    (this process imports no JAX)."""

    def __init__(self, hf: dict[str, Any]):
        self.hidden_size = hf["hidden_size"]
        self.head_dim = hf["head_dim"]
        self.num_layers = hf["num_hidden_layers"]
        self.num_heads = hf["num_attention_heads"]
        self.num_kv_heads = hf["num_key_value_heads"]
        self.intermediate_size = hf["intermediate_size"]
        self.vocab_size = hf["vocab_size"]


def _jax_free_config(shape: str) -> _Shape:
    return _Shape(hf_config(shape))
