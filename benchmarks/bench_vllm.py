"""A real vLLM (the CPU build) against the in-process JAX engine, on the embedded SmolLM2.

    python -m benchmarks.bench_vllm [--vllm-python PATH] [--rounds 2] [--repeats 3]

Needs the project's vLLM venv (``python -m rollout_bridge.vllm_env``) or ``--vllm-python``.
Four measurements, one run, one machine:

1. **Rollout tokens/s, same request set**: 8 prompts x 2 agents (rank 16, small random B),
   n = 4 samples, 64 new tokens, temperature 1, fixed seeds. Contenders, timed interleaved:
   ``in_process`` (``InProcessEngine``: one jitted sampler call for all rows), ``vllm``
   (``HTTPEngine`` as a training round sends them: each agent's prompts packed into one call,
   the calls in flight together, so all 64 rows are in vLLM's batch at once) and
   ``vllm_serial`` (one prompt per call, one call at a time: 4 rows in the batch; what
   vLLM's continuous batching buys is ``vllm / vllm_serial``).
2. **Publish latency into vLLM**: ``HTTPEngine.publish`` (PEFT export, load, unload of the
   previous version), a new version each time.
3. **Rollout correction on vLLM's own samples**: the tokens/s set's vLLM trajectories, with a
   reward (the completion names the right sum), go through one policy gradient under
   ``rl.behavior_logprobs: engine`` and ``recompute``, at the project's clip range
   (eps 0.2) and at the GSPO paper's (3e-4 / 4e-4); reported per choice: the GSPO ratio's
   distance from 1 at the first update, the clipped share, the importance weights, and the
   cosine between the two gradients; and the engine/trainer gap of those samples
   (``coevo_jax.train.gap.group_gaps``). Paired: the same tokens under every choice.
4. **Round phases per engine** (``--rounds``, 0 skips): ``coevo train`` on
   ``configs/cpu_default.yaml`` for that many rounds with ``rollout.engine`` ``inprocess`` and
   ``vllm``; the last round's ``timings`` (generate, reward, policy, self-check).

The two sides seed rows differently, and vLLM serves bf16 on a CPU with native bf16 (fp32
elsewhere: ``rollout_bridge.launcher.default_vllm_dtype``) while the in-process engine uses
the loop's fp32 backbone, so samples and token counts differ a little; rates are completion
tokens over wall time. On 2 cores the launcher binds vLLM's OpenMP threads to both cores
(before 2026-12-07 vLLM kept one for its scheduler), and both sides share the machine, so
only ratios from one run mean anything. Writes
``benchmarks/results/vllm-*.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import common

PAIRS = ((3, 4), (12, 9), (25, 17), (8, 8), (40, 2), (7, 15), (31, 30), (6, 19))
QUESTIONS = tuple(f"What is {a} + {b}? Answer with the number." for a, b in PAIRS)
ANSWERS = tuple(str(a + b) for a, b in PAIRS)
# The project's clip range (docs/design.md §4) and the one the GSPO paper trains with
# (Zheng et al. 2025, "Group Sequence Policy Optimization", §5.1: 3e-4 left, 4e-4 right).
CLIP_RANGES = {"eps_0.2": (0.2, 0.2), "gspo_paper": (3e-4, 4e-4)}


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = rec["figures"]
    v, inp = f["rollout"]["vllm"], f["rollout"]["in_process"]
    return [
        common.figure(
            "vllm_vs_in_process_tokens_per_s",
            "tokens/s",
            v["tokens_per_s"],
            inp["tokens_per_s"],
            higher_is_better=True,
            note="the same request set through a real vLLM-CPU server vs the in-process JAX "
            "engine (ratio > 1: vLLM is faster)",
            baseline="in-process engine (JAX)",
        )
    ]


def _requests(tok, n: int, max_tokens: int):
    from rollout_bridge.engine import GenerationRequest

    out = []
    for i, q in enumerate(QUESTIONS):
        ids = tok.encode(
            tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        )
        for a in (0, 1):
            out.append(
                GenerationRequest(
                    tuple(ids),
                    agent_id=a,
                    n=n,
                    max_tokens=max_tokens,
                    temperature=1.0,
                    seed=100 * i + a + 1,
                    query_id=f"q{i}a{a}",
                )
            )
    return out


def _rollout(args, bb, lora, python: str, work: Path) -> tuple[dict, Any, list]:
    """Measurements 1 and 2: tokens/s of the three contenders, publish latency; returns the
    vLLM server (still running) and vLLM's trajectories for measurement 3."""

    from coevo_jax.lora import unstack
    from rollout_bridge.http_engine import HTTPEngine
    from rollout_bridge.launcher import launch_vllm
    from rollout_bridge.local_engine import InProcessEngine

    tok = bb.tokenizer
    requests = _requests(tok, args.n, args.max_tokens)
    local = InProcessEngine(
        bb.params, bb.cfg, lora, eos_ids=tok.eos_token_ids, pad_id=tok.pad_token_id
    )
    for a in (0, 1):
        local.publish(a, unstack(lora, a), 1)
    t0 = time.perf_counter()
    server = launch_vllm(
        "default",
        served_name="base",
        agents=2,
        max_lora_rank=args.rank,
        python=python,
        log_path=work / "vllm.log",
        timeout=900,
    )
    start_s = time.perf_counter() - t0
    kw = dict(base_model="base", eos_ids=tok.eos_token_ids, family=bb.cfg.family)
    # the loop's own settings (coevo_jax.train.setup builds the engine with the defaults)
    vllm = HTTPEngine(server.url, adapter_dir=work / "a", **kw)
    serial = HTTPEngine(
        server.url, adapter_dir=work / "b", max_concurrency=1, max_prompts_per_call=1, **kw
    )
    publish_s = []
    for v in range(1, args.publishes + 2):
        t = time.perf_counter()
        vllm.publish(0, unstack(lora, 0), v)
        publish_s.append(time.perf_counter() - t)
    vllm.publish(1, unstack(lora, 1), 1)
    for a in (0, 1):
        serial.publish(a, unstack(lora, a), 1)
    tokens: dict[str, int] = {}
    trajs: dict[str, list] = {}

    def run(name, eng):
        def fn():
            out = eng.generate(requests)
            assert len(out) == len(requests) * args.n, (name, len(out))
            tokens[name] = sum(len(t.completion_ids) for t in out)
            trajs[name] = out

        return fn

    times = common.interleaved(
        {
            "in_process": run("in_process", local),
            "vllm": run("vllm", vllm),
            "vllm_serial": run("vllm_serial", serial),
        },
        args.repeats,
        warmup=1,
    )
    serial.close()
    out = {}
    for name, ts in times.items():
        s = common.summary(ts)
        out[name] = {
            **s,
            "completion_tokens": tokens[name],
            "tokens_per_s": tokens[name] / s["median_s"],
        }
    out["vllm_over_in_process"] = out["vllm"]["tokens_per_s"] / out["in_process"]["tokens_per_s"]
    out["continuous_batching_gain"] = (
        out["vllm"]["tokens_per_s"] / out["vllm_serial"]["tokens_per_s"]
    )
    out["server_start_s"] = start_s
    out["publish"] = common.summary(publish_s[1:])  # the first load warms the connection
    return out, (server, vllm), trajs["vllm"]


def _correction(bb, lora, trajs) -> dict:
    """Measurement 3: one policy gradient per ``behavior_logprobs`` choice on the same
    vLLM trajectories."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from coevo_jax.rl.config import RLConfig
    from coevo_jax.rl.train_step import policy_gradients
    from coevo_jax.train.batching import build_policy_batch
    from coevo_jax.train.buffers import Group
    from coevo_jax.train.gap import group_gaps

    by_query: dict[str, list] = {}
    for t in trajs:
        by_query.setdefault(t.query_id, []).append(t)
    groups = []
    for qid, ts in sorted(by_query.items()):
        answer = ANSWERS[int(qid[1 : qid.index("a")])]
        ts = sorted(ts, key=lambda t: t.sample_index)
        text = [bb.tokenizer.decode(list(t.completion_ids)) for t in ts]
        groups.append(
            Group(
                ts[0].agent_id,
                qid,
                ts[0].prompt_ids,
                tuple(t.completion_ids for t in ts),
                tuple(t.logprobs for t in ts),
                tuple(float(answer in s) for s in text),
                1,
            )
        )
    width = max(len(c) for g in groups for c in g.completions)
    out: dict[str, Any] = {
        "sequences": sum(len(g.completions) for g in groups),
        "groups_with_signal": sum(len(set(g.rewards)) > 1 for g in groups),
        "mean_reward": float(np.mean([r for g in groups for r in g.rewards])),
    }
    base = RLConfig(compute_dtype="float32", remat=False)
    out["gap"] = {
        str(agent): gap
        for agent, gap in group_gaps(
            groups,
            bb.params,
            lora,
            bb.cfg,
            base,
            completion_len=width,
            pad_id=bb.tokenizer.pad_token_id,
        ).items()
    }
    for setting, (eps_low, eps_high) in CLIP_RANGES.items():
        grads, res = {}, {"eps_low": eps_low, "eps_high": eps_high}
        for choice in ("engine", "recompute"):
            cfg = dataclasses.replace(
                base, behavior_logprobs=choice, eps_low=eps_low, eps_high=eps_high
            )
            batch, _ = build_policy_batch(
                groups, cfg, completion_len=width, pad_id=bb.tokenizer.pad_token_id
            )
            g, m = policy_gradients(
                lora, bb.params, batch, jax.random.key(0), model_cfg=bb.cfg, rl_cfg=cfg
            )
            grads[choice] = jnp.concatenate([x.ravel() for x in jax.tree.leaves(g)])
            res[choice] = {
                k: [float(x) for x in np.asarray(v)]
                for k, v in m.items()
                if k in ("ratio", "clip_region", "clip_low", "clip_high", "is_weight", "loss")
            }
            res[choice]["grad_norm"] = float(jnp.linalg.norm(grads[choice]))
        a, b = grads["engine"], grads["recompute"]
        res["grad_cosine"] = float(a @ b / (jnp.linalg.norm(a) * jnp.linalg.norm(b) + 1e-30))
        out[setting] = res
    return out


def _rounds(rounds: int, python: str, work: Path) -> dict:
    """Measurement 4: the last round's phase timings of ``coevo train`` per engine."""
    out = {}
    for engine in ("inprocess", "vllm"):
        run = work / f"run-{engine}"
        argv = [
            sys.executable,
            "-m",
            "coevo_jax.cli",
            "train",
            "--out",
            str(run),
            "--no-progress",
            f"rollout.engine={engine}",
            f"loop.rounds={rounds}",
        ]
        if engine == "vllm":
            argv.append(f"rollout.vllm_python={python}")
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"coevo train ({engine}) failed:\n{proc.stderr[-3000:]}")
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        out[engine] = {
            "wall_s": time.perf_counter() - t0,
            "last_round": rows[-1]["timings"],
            "tokens_generated": rows[-1]["tokens_generated"],
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=None, help="interpreter that imports vllm")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt and agent")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--publishes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="coevo train rounds per engine (0: skip)")
    args = ap.parse_args(argv)

    import jax

    from coevo_jax.lora import LoRAConfig, init_lora
    from coevo_jax.train.config import ModelSpec
    from coevo_jax.train.setup import load_backbone
    from rollout_bridge.launcher import default_vllm_dtype
    from rollout_bridge.vllm_env import find_vllm_python

    python = find_vllm_python(args.vllm_python)
    work = Path(tempfile.mkdtemp(prefix="bench_vllm-"))
    bb = load_backbone(ModelSpec())
    lora = init_lora(
        jax.random.key(1),
        LoRAConfig(n_agents=2, rank=args.rank, alpha=2.0 * args.rank, dropout=0.0),
        bb.params,
    )
    lora = lora.replace(
        params=jax.tree.map(
            lambda x: 0.02 * jax.random.normal(jax.random.key(2), x.shape, x.dtype), lora.params
        )
    )
    rollout, (server, engine), trajs = _rollout(args, bb, lora, python, work)
    engine.close()
    server.stop()
    figures = {"rollout": rollout, "correction": _correction(bb, lora, trajs)}
    if args.rounds:
        figures["rounds"] = _rounds(args.rounds, python, work)
    config = {
        "model": "SmolLM2-135M-Instruct (vLLM: HF export; in-process: fp32)",
        "vllm_dtype": default_vllm_dtype(),
        "requests": len(QUESTIONS) * 2,
        "vllm_calls": "HTTPEngine defaults (a training round's): up to 32 prompts a call, "
        "8 calls in flight; vllm_serial: 1 prompt a call, 1 call at a time",
        "n": args.n,
        "max_tokens": args.max_tokens,
        "rank": args.rank,
        "repeats": args.repeats,
        "publishes": args.publishes,
        "rounds": args.rounds,
        "vllm": "vllm-cpu 0.32 (rollout_bridge/vllm-cpu-requirements.txt)",
    }
    out = common.write_result("vllm", {"config": config, "figures": figures})
    print(
        common.format_table(
            [
                {
                    "contender": k,
                    "median s": rollout[k]["median_s"],
                    "tokens": rollout[k]["completion_tokens"],
                    "tokens/s": rollout[k]["tokens_per_s"],
                }
                for k in ("in_process", "vllm", "vllm_serial")
            ]
        )
    )
    print(
        f"vLLM / in-process {rollout['vllm_over_in_process']:.2f}x; continuous batching "
        f"{rollout['continuous_batching_gain']:.2f}x; publish "
        f"{1e3 * rollout['publish']['median_s']:.0f} ms median; server start "
        f"{rollout['server_start_s']:.0f} s"
    )
    c = figures["correction"]
    print(
        f"{c['sequences']} vLLM sequences, {c['groups_with_signal']} groups with signal; gap "
        + ", ".join(
            f"agent {a}: {g['token_abs']:.3f} nats/token, seq |log ratio| max {g['seq_absmax']:.3f}"
            for a, g in c["gap"].items()
        )
    )
    for setting in CLIP_RANGES:
        for choice in ("engine", "recompute"):
            print(
                setting,
                choice,
                {
                    k: [round(x, 4) for x in v] if isinstance(v, list) else round(v, 4)
                    for k, v in c[setting][choice].items()
                },
            )
        print(f"{setting}: gradient cosine engine vs recompute {c[setting]['grad_cosine']:.4f}")
    for engine, r in figures.get("rounds", {}).items():
        print(engine, {k: round(v, 1) for k, v in r["last_round"].items()})
    print(f"wrote {out}")
    shutil.rmtree(work, ignore_errors=True)
    return {"config": config, "figures": figures, "path": str(out)}


if __name__ == "__main__":
    main()
