"""The GPU check: the paper's shapes on one GPU, inside a hard wall-clock budget.

Qwen3-4B shapes with random bf16 weights (no hub access), 4 LoRA agents (r = 16 on all
seven projections), prompt 800 + completion 1000 tokens, the paper config's RL settings and
memory levers (``benchmarks.gpu_check_parts`` says which and how they are loaded). Parts,
in this order, each in its own process:

1. ``policy_step``: our jitted GSPO policy step, 64 rows in 4 micro-batches of 16: compile
   time apart from step time, completion tokens/s, FLOPs (compiled program and analytic),
   MFU against the GPU's dense bf16 peak, compiled memory and the device's peak memory;
2. ``router``: partial pass + familiarity heads per 800-token query at batch 1 and 32,
   against the paper's 11.87 ms;
3. ``torch_policy_step``: the same step in transformers + PEFT + TRL's loss, for the ratio
   (skipped, with the reason, without torch, its libraries or CUDA);
4. ``lora_stacked``: one mixed 4-agent pass against four single-agent passes.

Each part has a time limit (:data:`LIMITS_S`), cut to what is left of ``--budget-s``; a
part that reaches it is stopped (its process group killed) and recorded as ``skipped`` with
the reason and whatever it had measured by then; a part that no longer fits is not started.
So the whole check ends inside the budget plus start-up. If the policy step fails with
cuDNN attention (``rl.attention: auto`` on a GPU), it is run again with ``blockwise``.

The result is one JSON file that ``benchmarks/results_schema.json`` covers (the suite's
format: ``figures``, one ``benchmarks`` entry per part, and the parts' records under
``gpu_check``), a markdown table beside it and every part's output in one log:
``<out>/gpu_check-<shape>.{json,md,log}``.

``--shape tiny`` runs the same parts, levers included, on a tiny model on the CPU (the CI
smoke test). Run ``bash benchmarks/gpu_check.sh`` on the GPU machine.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks import common, run_all
from benchmarks.gpu_check_parts import OVERRIDES, PAPER_CONFIG, PAPER_ROUTER_MS, SHAPES, WORK

PARTS = ("policy_step", "router", "torch_policy_step", "lora_stacked")
# Seconds per part. The 4B policy step: about 10 s of start-up and weights, 1-3 min of
# compile, one warm-up and up to 3 timed steps of ~10 s; the PyTorch step runs ~3x slower.
LIMITS_S: dict[str, dict[str, float]] = {
    "qwen3-4b": {"policy_step": 240, "router": 75, "torch_policy_step": 150, "lora_stacked": 75},
    "tiny": {"policy_step": 150, "router": 90, "torch_policy_step": 150, "lora_stacked": 90},
}
BUDGET_S = {"qwen3-4b": 540.0, "tiny": 600.0}
TINY_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
MIN_PART_S = 10.0  # less than this cannot even import the libraries: the part is not started


def run_part(
    name: str, args: argparse.Namespace, overrides: list[str], limit_s: float, work: Path, log: Path
) -> dict[str, Any]:
    """Runs part ``name`` in a child process limited to ``limit_s``; returns its run entry
    (``benchmarks`` format) and its record (``{}`` when it wrote none)."""
    record = work / f"{name}.json"
    record.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "benchmarks.gpu_check_parts",
        name,
        "--shape",
        args.shape,
        "--record",
        str(record),
        "--time-limit-s",
        f"{limit_s:.1f}",
    ]
    for o in overrides:
        argv += ["--set", o]
    child_log = work / f"{name}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.shape == "tiny":
        # The smoke test's figures mean nothing and compiling is most of its time: XLA:CPU
        # without backend optimisation compiles about a third faster (same program).
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + TINY_XLA_FLAGS).strip()
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, (str(common.ROOT.parent), env.get("PYTHONPATH")))
    )
    run = run_all.run_child(argv, env, child_log, limit_s, echo=not args.quiet)
    text = child_log.read_text(encoding="utf-8", errors="replace")
    with log.open("a", encoding="utf-8") as f:
        f.write(f"===== {name} (limit {limit_s:.0f} s): {' '.join(argv[1:])}\n{text}\n")
    try:
        rec = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        rec = {}
    return {"run": run, "record": rec, "log_tail": text[-3000:], "limit_s": limit_s}


def part_status(out: Mapping[str, Any]) -> tuple[str, str | None]:
    """``(status, reason)`` of a finished part from its run and record."""
    run, rec = out["run"], out["record"]
    if rec.get("skipped"):
        return "skipped", rec["skipped"]
    if run["timed_out"]:
        return "skipped", (
            f"time limit of {out['limit_s']:.0f} s reached in stage {rec.get('stage', 'start')!r}"
        )
    if run["returncode"] != 0:
        last = [ln for ln in out["log_tail"].splitlines() if ln.strip()]
        return "failed", f"exit {run['returncode']}: {last[-1] if last else 'no output'}"
    if rec.get("stage") != "done":
        return "failed", f"ended in stage {rec.get('stage')!r} without its figures"
    return "ok", None


def entry(out: Mapping[str, Any] | None, status: str, reason: str | None, log: Path) -> dict:
    """The part's ``benchmarks`` entry (``results_schema.json``'s ``benchmark_run``)."""
    run = (out or {}).get("run") or {}
    e: dict[str, Any] = {
        "status": status,
        "returncode": run.get("returncode", 0),
        "timed_out": bool(run.get("timed_out", False)),
        "wall_s": run.get("wall_s", 0.0),
        "peak_rss_mib": run.get("peak_rss_mib", 0.0),
        "log": log.name,
        "raw": None,
    }
    if reason:
        e["reason"] = reason
    if status == "failed" and out:
        e["error"] = out["log_tail"][-2000:]
    return e


def run_parts(
    args: argparse.Namespace, work: Path, log: Path, after_each: Callable[[dict[str, Any]], None]
) -> None:
    """Runs the selected parts inside the budget. After each part, ``after_each`` gets
    ``{"parts": {part: (out or None, status, reason)}, "overrides": [...]}`` so far.

    A part may run for its own limit, or longer where the parts after it leave time over
    (an earlier part ended early), never into their limits; the budget's end caps both.
    """
    t_end = time.monotonic() + args.budget_s
    limits = dict(LIMITS_S[args.shape], **args.limit)
    overrides = list(args.set)
    done: dict[str, Any] = {}
    for i, name in enumerate(args.parts):
        later = sum(limits[p] for p in args.parts[i + 1 :])
        t_part = time.monotonic()
        limit = _limit(t_end, limits[name], later)
        if limit < min(MIN_PART_S, limits[name]):
            reason = f"budget of {args.budget_s:.0f} s spent ({max(limit, 0):.0f} s left)"
            done[name] = (None, "skipped", reason)
            after_each({"parts": done, "overrides": overrides})
            continue
        print(f"[{name}] limit {limit:.0f} s", flush=True)
        out = run_part(name, args, overrides, limit, work, log)
        status, reason = part_status(out)
        if name == "policy_step" and status == "failed" and _cudnn_retry(out, overrides):
            print(f"[{name}] failed with cuDNN attention; again with blockwise", flush=True)
            overrides.append("rl.attention=blockwise")
            own_left = limits[name] - (time.monotonic() - t_part)
            out = run_part(name, args, overrides, _limit(t_end, own_left, later), work, log)
            out["record"]["cudnn_attempt_failed"] = reason
            status, reason = part_status(out)
        done[name] = (out, status, reason)
        print(f"[{name}] {status}" + (f": {reason}" if reason else ""), flush=True)
        after_each({"parts": done, "overrides": overrides})


def _limit(t_end: float, own_s: float, later_s: float) -> float:
    """Seconds a part may run: ``own_s`` or what is left beyond ``later_s``, whichever is
    more, but no more than is left of the budget."""
    left = t_end - time.monotonic()
    return min(left, max(own_s, left - later_s))


def _cudnn_retry(out: Mapping[str, Any], overrides: list[str]) -> bool:
    """Whether a failed policy step ran cuDNN attention that the user did not ask for."""
    chosen = any(o.startswith("rl.attention=") for o in overrides)
    return out["record"].get("attention_resolved") == "cudnn" and not chosen


# ----------------------------------------------------------------------------- result


def _get(rec: Mapping[str, Any] | None, *path: str) -> Any:
    for p in path:
        if not isinstance(rec, Mapping):
            return None
        rec = rec.get(p)
    return rec


def figures(recs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The suite's figure rows; JAX against PyTorch, the paper or the four passes."""
    pol, tor = recs.get("policy_step") or {}, recs.get("torch_policy_step") or {}
    gib = lambda r: (_get(r, "device_memory", "peak_bytes_in_use") or 0) / 2**30 or None
    rows = [
        common.figure(
            "policy_step_completion_tokens_per_s",
            "tokens/s",
            pol.get("tokens_per_s"),
            tor.get("tokens_per_s"),
            higher_is_better=True,
            spread_jax=common.rate_range(pol.get("completion_tokens", 0), pol.get("steps")),
            spread_pytorch=common.rate_range(tor.get("completion_tokens", 0), tor.get("steps")),
            baseline="transformers + PEFT + TRL 1.16 loss",
        ),
        common.figure(
            "policy_step_mfu_analytic",
            "fraction",
            pol.get("mfu_analytic"),
            tor.get("mfu_analytic"),
            higher_is_better=True,
            note="6 N tokens + attention over the dense bf16 peak",
        ),
        common.figure(
            "policy_step_mfu_compiled",
            "fraction",
            pol.get("mfu_compiled"),
            None,
            higher_is_better=True,
            note="FLOPs of the compiled program, remat included",
        ),
        common.figure(
            "policy_step_peak_device_memory_gib", "GiB", gib(pol), gib(tor), higher_is_better=False
        ),
        common.figure(
            "policy_step_compile_s",
            "s",
            _get(pol, "compile", "compile_s"),
            None,
            higher_is_better=False,
            note="lowering not included",
        ),
    ]
    router = recs.get("router") or {}
    for b in ("1", "32"):
        rows.append(
            common.figure(
                f"router_ms_per_query_b{b}",
                "ms",
                _get(router, "batches", b, "ms_per_query"),
                PAPER_ROUTER_MS,
                higher_is_better=False,
                spread_jax=common.time_range(_get(router, "batches", b), 1000 / int(b)),
                baseline="the paper's 11.87 ms per query",
            )
        )
    lora = recs.get("lora_stacked") or {}
    rows.append(
        common.figure(
            "lora_stacked_vs_4_passes_s",
            "s",
            _get(lora, "stacked", "median_s"),
            _get(lora, "four_passes", "median_s"),
            higher_is_better=False,
            spread_jax=common.time_range(lora.get("stacked")),
            spread_pytorch=common.time_range(lora.get("four_passes")),
            baseline="four single-agent JAX passes",
        )
    )
    return [r for r in rows if r["jax"] is not None]


def assemble(
    args: argparse.Namespace, ran: Mapping[str, Any], log: Path, wall_s: float, command: str
) -> dict[str, Any]:
    """The result JSON (``results_schema.json``, suite ``gpu_check``)."""
    parts, benchmarks, recs = {}, {}, {}
    for name, (out, status, reason) in ran["parts"].items():
        rec = dict((out or {}).get("record") or {})
        recs[name] = rec  # a stopped part's figures so far (e.g. compile time) count too
        parts[name] = {**rec, "status": status, **({"reason": reason} if reason else {})}
        benchmarks[name] = entry(out, status, reason, log)
    device = next(
        (r["device"] for r in parts.values() if isinstance(r.get("device"), dict)),
        {"platform": "unknown", "kind": "unknown"},
    )
    machine = common.machine_info()
    machine["versions"] = run_all._versions()
    machine["device"] = device
    machine["jax_backend"] = device["platform"]  # the runner imports no JAX: a part's device
    return {
        "schema_version": 1,
        "suite": "gpu_check",
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"),
        "time_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "quick": args.shape == "tiny",
        "machine_name": run_all.machine_name(),
        "machine": machine,
        "git_commit": common.git_commit(),
        "config": {
            "quick": args.shape == "tiny",
            "shape": args.shape,
            "model": SHAPES[args.shape],
            "work": WORK[args.shape],
            "paper_config": PAPER_CONFIG,
            "overrides": OVERRIDES[args.shape] + ran["overrides"],
            "budget_s": args.budget_s,
            "limits_s": dict(LIMITS_S[args.shape], **args.limit),
        },
        "figures": figures(recs),
        "benchmarks": benchmarks,
        "scaling": None,
        "gpu_check": {
            "shape": args.shape,
            "device": device,
            "budget_s": args.budget_s,
            "wall_s": wall_s,
            "parts": parts,
        },
    }


def _part_limit_arg(text: str) -> tuple[str, float]:
    name, _, secs = text.partition("=")
    if name not in PARTS or not secs:
        raise argparse.ArgumentTypeError(f"--limit wants PART=SECONDS with PART in {PARTS}")
    return name, float(secs)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(common.ROOT / "results"))
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="wall-clock budget of all parts (default: 540 s for qwen3-4b)",
    )
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument(
        "--limit",
        type=_part_limit_arg,
        action="append",
        default=[],
        metavar="PART=S",
        help="a part's own time limit (default: LIMITS_S)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override of the paper config's rl/lora/router sections",
    )
    ap.add_argument("--no-torch", action="store_true", help="leave out torch_policy_step")
    ap.add_argument("--quiet", action="store_true", help="do not echo the parts' output")
    args = ap.parse_args(argv)
    args.limit = dict(args.limit)
    args.budget_s = args.budget_s or BUDGET_S[args.shape]
    if args.no_torch:
        args.parts = [p for p in args.parts if p != "torch_policy_step"]
    if not args.parts:
        ap.error("no part left to run")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"gpu_check-{args.shape}"
    log = stem.with_suffix(".log")
    log.write_text("", encoding="utf-8")
    t0 = time.monotonic()
    command = "python -m benchmarks.gpu_check " + " ".join(sys.argv[1:] if argv is None else argv)
    result: dict[str, Any] = {}

    def write(ran: dict[str, Any]) -> None:
        # After every part, so that a kill from outside (gpu_check.sh's backstop) keeps
        # the parts already done.
        result.clear()
        result.update(assemble(args, ran, log, time.monotonic() - t0, command.strip()))
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=float) + "\n")

    with tempfile.TemporaryDirectory(prefix="gpu_check-") as work:
        run_parts(args, Path(work), log, write)
    run_all.validate(result)
    table = run_all.markdown(result)
    stem.with_suffix(".md").write_text(table, encoding="utf-8")
    print(table)
    print(f"wrote {stem}.json ({result['gpu_check']['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
