"""Compiled memory of the policy step under each memory lever of ``RLConfig`` (issue #45).

Nothing runs: the jitted step (``coevo_jax.rl.train_step.make_policy_step``) is lowered on
abstract inputs (``jax.eval_shape``) and compiled for this machine's backend, and
``memory_analysis()`` gives its temporary bytes, the scratch memory the step needs besides
its arguments and outputs (``/work/shared/RECIPES.md``, "Checking scale without a GPU"). The
CPU compiler fuses and schedules differently from a GPU's, so read the figures as estimates
of the GPU's (within about 2x) and compare variants with each other.

The model is a random Qwen3-shaped decoder (``--preset tiny``: hidden 256, 4 layers, 32k
vocabulary, tied embeddings; ``--preset paper``: Qwen3-4B's shapes, which takes minutes per
variant), 4 LoRA agents (r = 16 on all seven projections), bf16 compute and backbone, GSPO
with the reference pass (beta = 1e-4), one length bucket. Variants:

* ``baseline``: today's defaults: whole-block remat, whole logits, ``attention: xla``;
* ``no_remat``: ``remat: false``, for scale;
* ``chunk``: ``logprob_chunk`` = ``--chunk``;
* ``blockwise``: ``attention: blockwise`` with ``attention_block`` = ``--block``;
* ``dots``, ``dots_no_batch``: the remat policies of those names;
* ``combined``: chunk + blockwise (+ whole-block remat).

Run ``python -m benchmarks.step_memory [--preset tiny|paper] [--variants a,b]``; the result
goes to ``benchmarks/results/step_memory-*.json`` and a table is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        model=dict(
            vocab_size=32000,
            hidden_size=256,
            intermediate_size=768,
            num_layers=4,
            num_heads=4,
            num_kv_heads=2,
            head_dim=64,
        ),
        rows=64,
        prompt=128,
        completion=256,
        micro_batches=8,
        chunk=32,
        block=128,
    ),
    # Qwen3-4B (config.json of Qwen/Qwen3-4B) at the paper's batch (issue #45).
    "paper": dict(
        model=dict(
            vocab_size=151936,
            hidden_size=2560,
            intermediate_size=9728,
            num_layers=36,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
        ),
        rows=512,
        prompt=800,
        completion=1000,
        micro_batches=8,
        chunk=64,
        block=512,
    ),
}

VARIANTS = ("baseline", "no_remat", "chunk", "blockwise", "dots", "dots_no_batch", "combined")


def variant_config(name: str, base: Any, chunk: int, block: int) -> Any:
    """The ``RLConfig`` of variant ``name``: ``base`` with that variant's levers set."""
    levers = {
        "baseline": {},
        "no_remat": dict(remat=False),
        "chunk": dict(logprob_chunk=chunk),
        "blockwise": dict(attention="blockwise", attention_block=block),
        "dots": dict(remat="dots"),
        "dots_no_batch": dict(remat="dots_no_batch"),
        "combined": dict(logprob_chunk=chunk, attention="blockwise", attention_block=block),
    }
    if name not in levers:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(levers)}")
    return dataclasses.replace(base, **levers[name])


def abstract_inputs(model_cfg: Any, rl_cfg: Any, rows: int, prompt: int, completion: int):
    """``(state, params, batch)`` as ``jax.ShapeDtypeStruct`` trees: nothing is allocated."""
    import jax
    import jax.numpy as jnp

    from coevo_jax.lora.config import LoRAConfig
    from coevo_jax.lora.init import init_lora
    from coevo_jax.models import init_params
    from coevo_jax.rl.logprobs import PolicyBatch
    from coevo_jax.rl.train_step import init_policy_state

    key = jax.random.key(0)
    params = jax.eval_shape(lambda k: init_params(model_cfg, k, jnp.bfloat16), key)
    lcfg = LoRAConfig(n_agents=4, rank=16)
    lora = jax.eval_shape(lambda k, p: init_lora(k, lcfg, p), key, params)
    state = jax.eval_shape(lambda lo, k: init_policy_state(lo, rl_cfg, k), lora, key)
    sds = jax.ShapeDtypeStruct
    batch = PolicyBatch(
        prompt_ids=sds((rows, prompt), jnp.int32),
        prompt_mask=sds((rows, prompt), jnp.int32),
        completion_ids=sds((rows, completion), jnp.int32),
        completion_mask=sds((rows, completion), jnp.int32),
        agent_ids=sds((rows,), jnp.int32),
        advantages=sds((rows,), jnp.float32),
        old_logp=sds((rows, completion), jnp.float32),
    )
    return state, params, batch


def measure(model_cfg: Any, rl_cfg: Any, inputs: tuple) -> dict[str, Any]:
    """Compiled memory (bytes) and compile time of the policy step for ``rl_cfg``."""
    from coevo_jax.rl.train_step import make_policy_step

    t0 = time.perf_counter()
    compiled = make_policy_step(model_cfg, rl_cfg).lower(*inputs).compile()
    seconds = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    return {
        "temp_bytes": int(mem.temp_size_in_bytes),
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "compile_s": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--chunk", type=int, default=None, help="logprob_chunk of the variants")
    ap.add_argument("--block", type=int, default=None, help="attention_block of the variants")
    ap.add_argument("--no-write", action="store_true", help="print only, write no JSON")
    args = ap.parse_args(argv)

    from benchmarks import common
    from coevo_jax.models import ModelConfig
    from coevo_jax.rl.config import RLConfig

    preset = PRESETS[args.preset]
    chunk = args.chunk or preset["chunk"]
    block = args.block or preset["block"]
    model_cfg = ModelConfig(family="qwen3", tie_word_embeddings=True, **preset["model"])
    base = RLConfig(micro_batches=preset["micro_batches"], compute_dtype="bfloat16")
    shape = (preset["rows"], preset["prompt"], preset["completion"])
    inputs = abstract_inputs(model_cfg, base, *shape)
    figures: dict[str, Any] = {}
    for name in args.variants.split(","):
        rl_cfg = variant_config(name, base, chunk, block)
        figures[name] = measure(model_cfg, rl_cfg, inputs)
        print(f"{name}: {figures[name]['temp_bytes'] / 2**20:.1f} MiB", flush=True)
    ref = figures.get("baseline", {}).get("temp_bytes")
    rows = [
        {
            "variant": name,
            "temp_MiB": f["temp_bytes"] / 2**20,
            "vs_baseline": f["temp_bytes"] / ref if ref else None,
            "compile_s": f["compile_s"],
        }
        for name, f in figures.items()
    ]
    print(common.format_table(rows))
    payload = {
        "config": {
            "preset": args.preset,
            "model": dataclasses.asdict(model_cfg),
            "rows": shape[0],
            "prompt": shape[1],
            "completion": shape[2],
            "micro_batches": base.micro_batches,
            "compute_dtype": base.compute_dtype,
            "lora": {"n_agents": 4, "rank": 16, "modules": "all seven"},
            "logprob_chunk": chunk,
            "attention_block": block,
        },
        "figures": figures,
    }
    if not args.no_write:
        print("wrote", common.write_result(f"step_memory-{args.preset}", payload))
    return payload


if __name__ == "__main__":
    main()
