"""Base-model reward per candidate domain: which tasks give RL groups that are not flat.

For each domain, ``--queries`` records are drawn (``random.Random(0)``), the base model
(adapters off) samples ``--samples`` completions per record through the in-process JAX
engine under the zero-shot templates, and the verifiers score them. Reports the mean reward,
the share of flat groups (all samples scored alike) and mean completion tokens.

A domain is ``SOURCE`` or ``SOURCE:FILTER`` (an offline source and a mixture filter, e.g.
``mbpp:short_code``) or a generated source of ``coevo_jax.data.reference`` (``ref_code``).

    python -m benchmarks.base_reward_by_domain ref_code,ref_if_wrap,synthetic_if \\
        --queries 16 --samples 4 --max-new-tokens 64 --temperature 0.7 --out base.json
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np


def domain_records(domain: str, n: int) -> list:
    from coevo_jax.data.mixtures import FILTERS, offline_loader

    source, _, flt = domain.partition(":")
    recs, _ = offline_loader(source, "test")
    recs = sorted(recs, key=lambda r: r.id)
    if flt:
        recs = [r for r in recs if FILTERS[flt](r)]
    return random.Random(0).sample(recs, min(n, len(recs)))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("domains", help="comma-separated domains")
    p.add_argument("--queries", type=int, default=32)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-input-tokens", type=int, default=256)
    p.add_argument("--out", default=None, help="write the JSON result here")
    a = p.parse_args(argv)

    from coevo_jax.data.templates import render_chat
    from coevo_jax.rewards import score_batch
    from coevo_jax.train.config import ModelSpec
    from coevo_jax.train.setup import load_backbone
    from rollout_bridge.engine import GenerationRequest
    from rollout_bridge.local_engine import InProcessEngine

    bb = load_backbone(ModelSpec())
    tok = bb.tokenizer
    eng = InProcessEngine(
        bb.params, bb.cfg, None, eos_ids=tok.eos_token_ids, pad_id=tok.pad_token_id
    )
    out = {
        "queries": a.queries,
        "samples": a.samples,
        "max_new_tokens": a.max_new_tokens,
        "temperature": a.temperature,
        "domains": {},
    }
    for d in a.domains.split(","):
        recs = domain_records(d, a.queries)
        reqs = [
            GenerationRequest(
                prompt_ids=tuple(render_chat(r, tok, a.max_input_tokens)),
                agent_id=-1,
                n=a.samples,
                max_tokens=a.max_new_tokens,
                temperature=a.temperature,
                seed=i,
                query_id=str(i),
            )
            for i, r in enumerate(recs)
        ]
        t0 = time.perf_counter()
        trajs = sorted(eng.generate(reqs), key=lambda t: (int(t.query_id), t.sample_index))
        gen_s = time.perf_counter() - t0
        texts = [tok.decode(list(t.completion_ids), skip_special_tokens=True) for t in trajs]
        rew = np.asarray(score_batch([recs[int(t.query_id)] for t in trajs], texts), float)
        rew = rew.reshape(len(recs), a.samples)
        out["domains"][d] = {
            "reward": float(rew.mean()),
            "flat_groups": float(np.mean(rew.std(axis=1) == 0)),
            "mean_tokens": float(np.mean([len(t.completion_ids) for t in trajs])),
            "gen_s": gen_s,
        }
        print(d, out["domains"][d], flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
