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

Conventions (also in ``benchmarks/README.md``):

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
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import common

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


def extract(name: str, rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Benchmark ``name``'s figure rows from its record: each ``bench_*`` module's own
    ``figures(rec)`` knows its layout (helpers in ``benchmarks.common``)."""
    return importlib.import_module(BENCHMARKS[name][0]).figures(rec)


def scaling_summary(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The scaling sweep's table and plot from its record: ``bench_scaling.summary`` knows
    its layout and where it put the plot (beside the JSON the record was read from)."""
    return importlib.import_module(BENCHMARKS["scaling"][0]).summary(rec, rec["_path"])


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
                figures += extract(name, rec)
                if name == "scaling":
                    scaling = scaling_summary(rec)
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
                entry["status"] = "failed"
                entry["error"] = f"could not read figures: {type(e).__name__}: {e}"
        benchmarks[name] = entry
    for name, run in runs.items():
        figures.append(
            common.figure(
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
                child_env["XLA_FLAGS"] = common.single_thread_xla_flags(env.get("XLA_FLAGS"))
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
