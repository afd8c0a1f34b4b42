"""The whole benchmark suite in one command: JAX against the PyTorch baseline, one table.

    python -m benchmarks.run_all [--quick] [--only NAME ...] [--out-dir DIR]

Runs each benchmark as ``python -m benchmarks.bench_<name> [--quick]`` in its own child
process, one after another (never two at once: they would time each other), with its JSON
redirected into ``<out-dir>/<date>-<machine>-raw/`` (``COEVO_BENCH_RESULTS``) and its output
in a log beside it. Every benchmark runs its JAX and PyTorch contenders in the same process
on the same model and shapes, interleaved (see ``benchmarks/common.interleaved``); this
runner only collects. It then writes

- ``<out-dir>/<date>-<machine>.json``: a top-level ``figures`` list of
  ``{name, unit, jax, pytorch, ratio, spread}`` plus config, machine, git commit, each
  benchmark's status and the scaling sweep; validated by ``benchmarks/results_schema.json``;
- ``<out-dir>/<date>-<machine>.md``: the same as a markdown table (also printed), with the
  command that made it;
- ``<out-dir>/<date>-<machine>-scaling.png``: the scaling plot (path relative to the JSON).

Conventions (also in ``benchmarks/NOTES.md``):

- ``ratio > 1`` means JAX is better: ``jax / pytorch`` for throughputs (unit ``.../s``),
  ``pytorch / jax`` for times, latencies and fractions where lower is better.
- ``spread`` is ``{"jax": [lo, hi], "pytorch": [lo, hi]}`` in the figure's unit: the range of
  the timed repeats (min-max of the wall times, converted), or ``null`` where the benchmark
  timed once or keeps only medians.
- Peak memory is ``ru_maxrss`` from ``wait4`` of each benchmark process: the largest single
  process's resident set in that benchmark's tree. Both contenders live in one process, so it
  is recorded under ``jax`` with ``pytorch: null`` and a note.

A failing benchmark does not stop the suite: it is recorded with its exit code and the tail
of its log, its figures are missing, and the runner exits 1.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.bench_policy_step import TORCH_NAMES, torch_key

SCHEMA = common.ROOT / "results_schema.json"

# name -> (module, prefix of the JSON file it writes via common.write_result)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "policy_step": ("benchmarks.bench_policy_step", "policy_step"),
    "sampler": ("benchmarks.bench_sampler", "sampler"),
    "router": ("benchmarks.bench_router", "router"),
    "publish": ("benchmarks.bench_publish", "publish"),
    "bridge": ("benchmarks.bench_bridge", "bridge"),
    "rewards": ("benchmarks.bench_rewards", "bench_rewards"),
    "scaling": ("benchmarks.bench_scaling", "scaling"),
    "lora": ("benchmarks.bench_lora", "lora"),
}

# --quick extras that keep CI short (one JAX dtype: bf16 is the slower one on CPU anyway)
QUICK_ARGS = {"sampler": ["--dtypes", "fp32"]}

# the benchmarks with a --threads option
THREADED = ("sampler", "router")

# ----------------------------------------------------------------------------- running


def machine_name() -> str:
    """A short file-name-safe machine label: the GPU model if there is one, else CPU cores."""
    name = None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout.strip()
            if out:
                gpus = out.splitlines()
                name = f"{len(gpus)}x-{gpus[0]}" if len(gpus) > 1 else gpus[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    if not name:
        name = f"cpu{os.cpu_count()}"
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-").lower()


def run_child(
    argv: list[str], env: Mapping[str, str], log_path: Path, timeout_s: float, echo: bool
) -> dict[str, Any]:
    """Runs ``argv`` in a new session; returns exit code, wall time and peak RSS (``wait4``).

    The child's stdout+stderr go to ``log_path`` (and to ours when ``echo``). Past
    ``timeout_s`` its process group gets SIGTERM, then SIGKILL 10 s later.
    """
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            cwd=common.ROOT.parent,
        )
        timed_out = threading.Event()

        def _kill():
            timed_out.set()
            for sig, wait in ((15, 10.0), (9, 0.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    return
                time.sleep(wait)

        timer = threading.Timer(timeout_s, _kill)
        timer.daemon = True
        timer.start()
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if echo:
                    sys.stdout.write("    " + line)
                    sys.stdout.flush()
        finally:
            timer.cancel()
        # wait4 rather than proc.wait(): its rusage is this child's (and its reaped
        # descendants'), where getrusage(RUSAGE_CHILDREN) would mix all benchmarks.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "returncode": proc.returncode,
        "timed_out": timed_out.is_set(),
        "wall_s": time.perf_counter() - t0,
        # Linux reports ru_maxrss in KiB
        "peak_rss_mib": usage.ru_maxrss / 1024.0,
    }


def newest_result(raw_dir: Path, prefix: str) -> dict[str, Any] | None:
    """The newest complete ``<prefix>-*.json`` in ``raw_dir`` (a ``partial`` one if that is all)."""
    files = sorted(raw_dir.glob(f"{prefix}-*.json"), key=lambda p: p.stat().st_mtime)
    records = []
    for f in reversed(files):
        try:
            records.append((f, json.loads(f.read_text(encoding="utf-8"))))
        except (OSError, json.JSONDecodeError):
            continue
    for f, rec in records:
        if not rec.get("partial"):
            return {**rec, "_path": str(f)}
    return {**records[0][1], "_path": str(records[0][0])} if records else None


# ----------------------------------------------------------------------------- figures


def figure(
    name: str,
    unit: str,
    jax: float | None,
    pytorch: float | None,
    *,
    higher_is_better: bool,
    spread_jax: list | None = None,
    spread_pytorch: list | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One row of ``figures``; ``ratio`` > 1 means JAX is better whatever the unit."""
    ratio = None
    if jax is not None and pytorch is not None and jax > 0 and pytorch > 0:
        ratio = jax / pytorch if higher_is_better else pytorch / jax
    spread = None
    if spread_jax is not None or spread_pytorch is not None:
        spread = {"jax": spread_jax, "pytorch": spread_pytorch}
    out = {
        "name": name,
        "unit": unit,
        "jax": jax,
        "pytorch": pytorch,
        "ratio": ratio,
        "spread": spread,
        "higher_is_better": higher_is_better,
    }
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def _rate_range(work: float, s: Mapping[str, Any] | None) -> list[float] | None:
    """``[lo, hi]`` of ``work / time`` over a ``common.summary`` (slowest run gives lo)."""
    if not s or not s.get("min_s") or not s.get("max_s"):
        return None
    return [work / s["max_s"], work / s["min_s"]]


def _time_range(s: Mapping[str, Any] | None, scale: float = 1.0) -> list[float] | None:
    if not s or s.get("min_s") is None or s.get("max_s") is None:
        return None
    return [scale * s["min_s"], scale * s["max_s"]]


def _best_jax(figs: Mapping[str, Any], key: Callable[[Mapping[str, Any]], float]) -> str | None:
    names = [n for n in figs if n.startswith("jax")]
    return max(names, key=lambda n: key(figs[n])) if names else None


# PyTorch contender -> (figure-name suffix, how the baseline runs)
_TORCH_FIGURES = {
    (False, False): ("", ""),
    (True, False): ("_bf16", " under bf16 autocast"),
    (False, True): ("_gc", " with gradient checkpointing"),
    (True, True): ("_bf16_gc", " under bf16 autocast with gradient checkpointing"),
}


def policy_step_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Like for like only, one figure per PyTorch contender in the record: the fastest JAX
    variant doing its work (``bench_policy_step.torch_key``: bf16 matmuls against bf16
    autocast, ``-remat`` against gradient checkpointing) against it."""
    figs = rec["figures"]
    n = rec["config"]["completion_tokens_per_step"]
    out = []
    for key, (suffix, how) in _TORCH_FIGURES.items():
        torch_f = figs.get(TORCH_NAMES[key])
        mine = {k: v for k, v in figs.items() if k.startswith("jax") and torch_key(k) == key}
        best = _best_jax(mine, lambda f: f["completion_tokens_per_s"])
        if best is None:
            continue
        jf = mine[best]
        out.append(
            figure(
                f"policy_step_tokens_per_s{suffix}",
                "completion tokens/s",
                jf["completion_tokens_per_s"],
                torch_f["completion_tokens_per_s"] if torch_f else None,
                higher_is_better=True,
                spread_jax=_rate_range(n, jf),
                spread_pytorch=_rate_range(n, torch_f),
                jax_variant=best,
                baseline="transformers + PEFT + TRL GRPOTrainer._compute_loss" + how,
            )
        )
    return out


def sampler_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    figs, cfg = rec["figures"], rec["config"]
    n_prompt, rows, new = cfg["prompt_tokens"], cfg["prompts"], cfg["new_tokens"]
    torch_f = figs.get("torch_fp32")
    out = []
    for kind, key in (("prefill", "prefill_tok_s"), ("decode", "decode_tok_s")):
        best = _best_jax(figs, lambda f, key=key: f[key])
        jf = figs[best] if best else None

        def spread(f, kind=kind):
            if f is None:
                return None
            if kind == "prefill":
                return _rate_range(n_prompt, f["prefill"])
            # decode = full call - prefill call; the range holds the prefill at its median
            pre = f["prefill"]["median_s"]
            lo_t, hi_t = f["full"]["min_s"] - pre, f["full"]["max_s"] - pre
            work = rows * (new - 1)
            return [work / hi_t, work / lo_t] if lo_t > 0 else None

        out.append(
            figure(
                f"sampler_{kind}_tokens_per_s",
                "tokens/s",
                jf[key] if jf else None,
                torch_f[key] if torch_f else None,
                higher_is_better=True,
                spread_jax=spread(jf),
                spread_pytorch=spread(torch_f),
                jax_variant=best,
                baseline="transformers generate",
            )
        )
    return out


def router_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
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
            figure(
                f"router_latency_ms_per_query_b{b}",
                "ms/query",
                1e3 * jt["median_s"] / b,
                1e3 * tt["median_s"] / b if tt else None,
                higher_is_better=False,
                spread_jax=_time_range(jt, 1e3 / b),
                spread_pytorch=_time_range(tt, 1e3 / b),
                baseline="transformers, layer list cut at floor(3L/4)",
            )
        )
        jg = jr.get("generate_b1")
        tg = tr.get("generate_b1")
        if jg:
            out.append(
                figure(
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
            figure(
                "agent_generation_ms",
                "ms",
                1e3 * jg["median_s"],
                1e3 * tg["median_s"] if tg else None,
                higher_is_better=False,
                spread_jax=_time_range(jg, 1e3),
                spread_pytorch=_time_range(tg, 1e3),
                note=f"one agent, batch 1, {rec['config'].get('gen_tokens', 256)} new tokens",
                baseline="transformers generate",
            )
        )
    return out


def publish_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    p = rec["figures"]["publish"]
    return [
        figure(
            "adapter_publish_ms",
            "ms",
            1e3 * p["median_s"],
            None,
            higher_is_better=False,
            spread_jax=_time_range(p, 1e3),
            note="HTTPEngine.publish (PEFT export + load + unload of the previous version) "
            f"against the local server; {rec['config']['model']}, rank {rec['config']['rank']}",
        )
    ]


def bridge_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = rec["figures"]
    inp, http = f["in_process"], f["http"]
    return [
        figure(
            "bridge_http_vs_in_process_tokens_per_s",
            "tokens/s",
            http["tokens_per_s"],
            inp["tokens_per_s"],
            higher_is_better=True,
            spread_jax=_rate_range(http["completion_tokens"], http),
            spread_pytorch=_rate_range(inp["completion_tokens"], inp),
            note="the same batch through the HTTP engine + local server vs the in-process "
            "engine (ratio < 1 is the protocol's cost)",
            baseline="in-process engine (JAX)",
        )
    ]


def rewards_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    by_set: dict[str, list[Mapping[str, Any]]] = {}
    for row in rec["rows"]:
        by_set.setdefault(row["set"], []).append(row)
    out = []
    for name, rows in by_set.items():
        best = max(rows, key=lambda r: r["items_per_s"])
        ref = best.get("math_verify_items_per_s")
        ref = ref if isinstance(ref, int | float) else None
        out.append(
            figure(
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


def lora_figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = rec["figures"]
    stacked, passes = f["jax-stacked"], f["jax-4-passes"]
    out = [
        figure(
            "lora_stacked_vs_4_passes_s",
            "s",
            stacked["median_s"],
            passes["median_s"],
            higher_is_better=False,
            spread_jax=[stacked["min_s"], stacked["max_s"]],
            spread_pytorch=[passes["min_s"], passes["max_s"]],
            note="fwd+bwd of a mixed 4-agent batch vs four single-agent passes (both JAX)",
            baseline="JAX, four single-agent passes",
        ),
        figure(
            "adapter_export_ms",
            "ms",
            1e3 * f["export_smollm2_r16"]["seconds"],
            None,
            higher_is_better=False,
            note="export_peft of one r=16 SmolLM2 adapter",
        ),
    ]
    for tok, v in f.get("sweep_tokens_per_agent", {}).items():
        out.append(
            figure(
                f"lora_stacked_vs_4_passes_{tok}_tokens_per_agent_s",
                "s",
                v["stacked_s"],
                v["four_passes_s"],
                higher_is_better=False,
                note=f"one row of {tok} tokens per agent (the memory-bound end)",
                baseline="JAX, four single-agent passes",
            )
        )
    if "peft-4-passes" in f:
        out.append(
            figure(
                "lora_stacked_vs_peft_4_passes_s",
                "s",
                stacked["median_s"],
                f["peft-4-passes"]["median_s"],
                higher_is_better=False,
                note="PEFT: set_adapter + fwd/bwd per agent",
            )
        )
    return out


EXTRACT: dict[str, Callable[[Mapping[str, Any]], list[dict[str, Any]]]] = {
    "lora": lora_figures,
    "policy_step": policy_step_figures,
    "sampler": sampler_figures,
    "router": router_figures,
    "publish": publish_figures,
    "bridge": bridge_figures,
    "rewards": rewards_figures,
    "scaling": lambda rec: [],
}


def scaling_summary(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The scaling sweep reduced to one number per point (or ``"skipped"``/``"failed: ..."``)."""
    out: dict[str, Any] = {"config": rec["config"]}
    for kind, field in (("policy_step", "step_s"), ("router", "batch_s")):
        out[kind] = {
            k: (v[field] if isinstance(v, dict) else str(v))
            for k, v in rec["figures"][kind].items()
        }
    return out


# ----------------------------------------------------------------------------- report


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _fmt_range(r: list | None) -> str:
    return "-" if not r else f"{_fmt(r[0])}-{_fmt(r[1])}"


def markdown(result: Mapping[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"# Benchmarks {result['date']} on {result['machine_name']}",
        "",
        f"Command: `{result['command']}`  ",
        f"Commit: `{result['git_commit']}`  ",
        f"Machine: `{result['machine_name']}`, {m.get('cpu', '?')}, {m.get('cpu_count', '?')} "
        f"cores, 1-min load average at the end {_fmt((m.get('load_average') or [None])[0])}  ",
        "Versions: "
        + ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items())
        + f"; JAX backend {m.get('jax_backend', '?')}",
        "",
        "ratio > 1 = JAX better (throughput: JAX/PyTorch; time: PyTorch/JAX). "
        "Spread: min-max over the timed repeats.",
        "",
        "| figure | unit | JAX | PyTorch / baseline | ratio | JAX spread | PyTorch spread |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in result["figures"]:
        sp = f.get("spread") or {}
        lines.append(
            f"| {f['name']} | {f['unit']} | {_fmt(f['jax'])} | {_fmt(f['pytorch'])} | "
            f"{_fmt(f['ratio'])} | {_fmt_range(sp.get('jax'))} | {_fmt_range(sp.get('pytorch'))} |"
        )
    sc = result.get("scaling")
    if sc:
        cfg = sc["config"]
        lines += [
            "",
            f"Scaling ({cfg['model']}, {cfg['backend']}; plot `{sc.get('plot', '-')}`): "
            "policy step s/step | router s/batch",
            "",
            "| batch \\ length | " + " | ".join(str(x) for x in cfg["lengths"]) + " |",
            "|---|" + "---|" * len(cfg["lengths"]),
        ]
        for b in cfg["batches"]:
            cells = []
            for seq in cfg["lengths"]:
                p = sc["policy_step"].get(f"b{b}_L{seq}")
                r = sc["router"].get(f"b{b}_L{seq}")
                short = lambda v: _fmt(v) if isinstance(v, float) else str(v).split(":")[0]
                cells.append(f"{short(p)} \\| {short(r)}")
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
    bad = {k: v for k, v in result["benchmarks"].items() if v["status"] != "ok"}
    if bad:
        lines += ["", "Failed: " + ", ".join(f"{k} ({v['status']})" for k, v in bad.items())]
    return "\n".join(lines) + "\n"


def validate(result: Mapping[str, Any], schema_path: Path = SCHEMA) -> None:
    """Raises ``jsonschema.ValidationError`` when ``result`` breaks the schema (if installed)."""
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(result, json.loads(schema_path.read_text(encoding="utf-8")))


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for pkg in ("jax", "jaxlib", "flax", "optax", "torch", "transformers", "peft", "trl"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def assemble(
    records: Mapping[str, Mapping[str, Any] | None],
    runs: Mapping[str, Mapping[str, Any]],
    *,
    command: str,
    quick: bool,
    machine_label: str,
    date: str,
) -> dict[str, Any]:
    """The suite's JSON from each benchmark's record and its run (status, memory)."""
    figures: list[dict[str, Any]] = []
    benchmarks: dict[str, Any] = {}
    config: dict[str, Any] = {"quick": quick}
    scaling = None
    for name, run in runs.items():
        rec = records.get(name)
        entry = {k: run[k] for k in ("returncode", "wall_s", "peak_rss_mib", "log", "timed_out")}
        entry["status"] = "ok" if run["returncode"] == 0 and rec else "failed"
        if rec is None:
            entry["error"] = run.get("log_tail", "")[-2000:]
        else:
            entry["raw"] = rec.get("_path")
            config[name] = rec.get("config")
            try:
                figures += EXTRACT[name](rec)
                if name == "scaling":
                    scaling = scaling_summary(rec)
                    png = Path(rec["_path"]).with_suffix(".png")
                    scaling["plot"] = str(png) if png.exists() else None
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
                entry["status"] = "failed"
                entry["error"] = f"could not read figures: {type(e).__name__}: {e}"
        benchmarks[name] = entry
    for name, run in runs.items():
        figures.append(
            figure(
                f"peak_rss_mib_{name}",
                "MiB",
                run["peak_rss_mib"],
                None,
                higher_is_better=False,
                note="largest process of the benchmark's tree; JAX and PyTorch share it",
            )
        )
    machine = common.machine_info()
    machine["versions"] = _versions()
    for rec in records.values():  # the runner imports neither jax nor torch: ask a child
        for key in ("jax_backend", "jax_devices", "torch_threads"):
            if rec and key in (rec.get("machine") or {}):
                machine.setdefault(key, rec["machine"][key])
    return {
        "schema_version": 1,
        "suite": "coevo-jax benchmarks",
        "date": date,
        "time_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "quick": quick,
        "machine_name": machine_label,
        "machine": machine,
        "git_commit": common.git_commit(),
        "config": config,
        "figures": figures,
        "benchmarks": benchmarks,
        "scaling": scaling,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every benchmark's --quick (CI)")
    ap.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run these only")
    ap.add_argument("--out-dir", type=Path, default=common.ROOT / "results")
    ap.add_argument("--machine", help="label in the file names (default: GPU model or cpuN)")
    ap.add_argument("--timeout-s", type=float, default=None, help="per benchmark")
    ap.add_argument("--quiet", action="store_true", help="do not echo benchmark output")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="thread limit for JAX and PyTorch: --threads for sampler and router, "
        "OMP_NUM_THREADS (+ single-threaded XLA:CPU flags for 1) for the others; 1 is fair "
        "on a shared, overloaded box; unset = each benchmark's own default",
    )
    ap.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="extra arguments for one benchmark, e.g. --extra 'scaling=--budget-s 600'",
    )
    args = ap.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    timeout = args.timeout_s or (1200.0 if args.quick else 7200.0)
    extra: dict[str, list[str]] = {}
    for e in args.extra:
        k, _, v = e.partition("=")
        if k not in BENCHMARKS:
            ap.error(f"--extra {e!r}: unknown benchmark {k!r} (one of {', '.join(BENCHMARKS)})")
        extra.setdefault(k, []).extend(v.split())

    label = args.machine or machine_name()
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    stem = f"{date}-{label}"
    raw_dir = args.out_dir / f"{stem}-raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COEVO_BENCH_RESULTS=str(raw_dir), PYTHONUNBUFFERED="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    repo = common.ROOT.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH")) if p)

    runs: dict[str, dict[str, Any]] = {}
    records: dict[str, Any] = {}
    for i, name in enumerate(names, 1):
        module, prefix = BENCHMARKS[name]
        argv_ = [sys.executable, "-m", module]
        argv_ += ["--quick", *QUICK_ARGS.get(name, [])] if args.quick else []
        child_env = env
        if args.threads is not None and name in THREADED:
            argv_ += ["--threads", str(args.threads)]
        elif args.threads:
            # the same limits for benchmarks without the option: torch reads OMP_NUM_THREADS
            # at import, XLA:CPU these flags
            child_env = dict(env, OMP_NUM_THREADS=str(args.threads))
            if args.threads == 1:
                child_env["XLA_FLAGS"] = (
                    env.get("XLA_FLAGS", "")
                    + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
                )
        argv_ += extra.get(name, [])
        print(f"[{i}/{len(names)}] {' '.join(argv_[1:])}", flush=True)
        log = raw_dir / f"{name}.log"
        started = time.time()
        run = run_child(argv_, child_env, log, timeout, echo=not args.quiet)
        run["log"] = str(log)
        rec = newest_result(raw_dir, prefix)
        if rec is not None and Path(rec["_path"]).stat().st_mtime < started:
            rec = None  # left over from an earlier run today
        if run["returncode"] != 0 or rec is None:
            run["log_tail"] = log.read_text(encoding="utf-8", errors="replace")[-4000:]
            print(f"    FAILED ({run['returncode']}); log: {log}", flush=True)
        print(
            f"    done in {run['wall_s']:.0f} s, peak RSS {run['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
        runs[name], records[name] = run, rec

    cmd = "python -m benchmarks.run_all" + (" " + " ".join(argv) if argv else "")
    if argv is None:
        cmd = "python -m benchmarks.run_all " + " ".join(sys.argv[1:])
    result = assemble(
        records, runs, command=cmd.strip(), quick=args.quick, machine_label=label, date=date
    )
    if result["scaling"] and result["scaling"]["plot"]:
        # beside the table, under a stable name, so a README can link it
        png = args.out_dir / f"{stem}-scaling.png"
        shutil.copyfile(result["scaling"]["plot"], png)
        result["scaling"]["plot"] = png.name
    validate(result)
    json_path = args.out_dir / f"{stem}.json"
    md_path = args.out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    md = markdown(result)
    md_path.write_text(md, encoding="utf-8")
    print()
    print(md)
    print(f"wrote {json_path} and {md_path}")
    return 0 if all(b["status"] == "ok" for b in result["benchmarks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
