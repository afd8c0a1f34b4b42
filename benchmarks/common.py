"""Helpers every benchmark shares: machine description, git commit, interleaved timing,
JSON results and a printed table.

Results go to ``benchmarks/results/<name>-<UTC timestamp>.json`` with the figures, the
benchmark's config, the machine and the git commit, so a number can always be traced back.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent

# The random 2-layer Llama that --quick benchmarks serve or time (CI-sized).
TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "eos_token_id": 1,
}
# COEVO_BENCH_RESULTS redirects every benchmark's JSON (run_all keeps a run's raw files together).
RESULTS = Path(os.environ.get("COEVO_BENCH_RESULTS") or ROOT / "results")


def single_thread_xla_flags(flags: str | None) -> str:
    """The ``XLA_FLAGS`` value ``flags`` plus the flags that keep XLA:CPU on one thread (a
    benchmark's ``--threads 1``: steady timings on a shared, overloaded machine). XLA reads
    them once, when jax is first imported, so they must be set before that import."""
    return (flags or "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Where the figures were measured: CPU, core count, load, library versions."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    for mod in ("jax", "jaxlib", "flax", "torch", "transformers"):
        if mod in sys.modules:
            info[mod] = getattr(sys.modules[mod], "__version__", "?")
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        info["jax_backend"] = jax.default_backend()
        info["jax_devices"] = [str(d) for d in jax.devices()]
    if "torch" in sys.modules:
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    return info


def git_commit() -> str:
    """HEAD's hash, with ``-dirty`` when tracked files differ from it."""
    try:
        head = subprocess.check_output(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, text=True, stderr=subprocess.DEVNULL
        ).strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "."], cwd=ROOT.parent, check=False
        ).returncode
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(wall seconds, result)`` of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    repeats: int,
    *,
    warmup: int = 1,
    usage: dict[str, list[dict[str, float]]] | None = None,
) -> dict[str, list[float]]:
    """Wall times of each fn, run round-robin so load drift hits every contender alike.

    Each fn runs ``warmup`` untimed times first (compiles, allocator warm-up), then the
    contenders alternate ``repeats`` times, the order rotating each round. A ``usage`` dict
    gets, per fn, each timed call's process CPU time and page faults (:func:`rusage_delta`;
    the process's other threads count too, so only for fns that run alone).
    """
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            before = resource.getrusage(resource.RUSAGE_SELF)
            times[name].append(timed(fns[name])[0])
            if usage is not None:
                usage.setdefault(name, []).append(rusage_delta(before))
    return times


def rusage_delta(before: Any) -> dict[str, float]:
    """This process's user and system CPU seconds and minor page faults since ``before``
    (a ``resource.getrusage(RUSAGE_SELF)``)."""
    now = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "user_s": now.ru_utime - before.ru_utime,
        "sys_s": now.ru_stime - before.ru_stime,
        "minor_faults": float(now.ru_minflt - before.ru_minflt),
    }


def summary(times: Sequence[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "runs": len(times),
    }


def write_result(name: str, payload: Mapping[str, Any]) -> Path:
    """Writes ``payload`` + machine + commit + time to ``results/<name>-<stamp>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    record = {
        "benchmark": name,
        "time_utc": stamp,
        "git_commit": git_commit(),
        "machine": machine_info(),
        **payload,
    }
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A plain-text (markdown) table of ``rows``; floats get 4 significant digits."""
    if not rows:
        return ""
    columns = list(columns or rows[0].keys())

    def cell(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    body = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(columns)]
    line = lambda vals: (
        "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths, strict=True)) + " |"
    )
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(columns), sep, *(line(b) for b in body)])


def served_model(quick: bool, work: Path) -> tuple[Any, Any, Any, str, dict[str, str]]:
    """The model a rollout-server benchmark serves, loaded the same way on the client side.

    Returns ``(params, cfg, tokenizer, description, server_kwargs)``: with ``quick``, the
    random :data:`TINY_LLAMA` (its config.json written to ``work``; params drawn as the
    server's ``--random-config --seed 0`` draws them; no tokenizer), else the embedded
    SmolLM2 in fp32. ``server_kwargs`` go to ``rollout_bridge.launcher.local_command``.
    """
    import jax
    import jax.numpy as jnp

    from coevo_jax.models import ModelConfig, default_model_path, init_params, load

    if quick:
        cfg_path = work / "config.json"
        cfg_path.write_text(json.dumps(TINY_LLAMA))
        cfg = ModelConfig.from_hf_dict(TINY_LLAMA)
        params = init_params(cfg, jax.random.PRNGKey(0))
        desc = "random 2-layer Llama (hidden 64)"
        return params, cfg, None, desc, {"random_config": str(cfg_path)}
    model, tok = load(default_model_path(), dtype=jnp.float32, progress=False)
    return model.params, model.config, tok, "SmolLM2-135M-Instruct Q4_1 GGUF (fp32)", {}


# ----------------------------------------------------------------------------- figure rows


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


def rate_range(work: float, s: Mapping[str, Any] | None) -> list[float] | None:
    """``[lo, hi]`` of ``work / time`` over a ``common.summary`` (slowest run gives lo)."""
    if not s or not s.get("min_s") or not s.get("max_s"):
        return None
    return [work / s["max_s"], work / s["min_s"]]


def time_range(s: Mapping[str, Any] | None, scale: float = 1.0) -> list[float] | None:
    """``[lo, hi]`` of a ``summary``'s times times ``scale`` (e.g. ``1e3`` for ms)."""
    if not s or s.get("min_s") is None or s.get("max_s") is None:
        return None
    return [scale * s["min_s"], scale * s["max_s"]]


def best_jax(figs: Mapping[str, Any], key: Callable[[Mapping[str, Any]], float]) -> str | None:
    """The JAX contender (name starting ``jax``) with the largest ``key``, or None."""
    names = [n for n in figs if n.startswith("jax")]
    return max(names, key=lambda n: key(figs[n])) if names else None
