"""Model loading: peak host memory and seconds per GB of ``coevo_jax.models.load`` on a
multi-file safetensors checkpoint.

    python -m benchmarks.bench_load [--quick] [--layers 8] [--shard-size 100MB]

Writes a random Qwen3-shaped model (Qwen3-0.6B's widths, ``--layers`` blocks, ``--vocab``
rows; bf16 on disk) into a temporary directory with ``save_hf``, as shards of
``--shard-size`` and once more as one file, then loads it in a fresh child process per case
and reports:

- ``peak_mb``: the child's RSS high-water mark during ``load`` (``VmHWM`` after resetting it
  through ``/proc/self/clear_refs`` once jax and the loader are imported) minus the RSS at
  that point; ``peak_mb_again`` the same for a second load in that process (the loader's
  jitted layer update compiled, the allocator warm);
- ``placed_mb``: the bytes of the loaded parameters on all devices. On the CPU backend the
  devices are host memory, so these count towards the RSS; ``overhead_mb = peak - placed``
  (and ``overhead_mb_again``) is what loading costs beyond the result;
- ``bound_mb``: the loader's stated bound on that overhead (``coevo_jax.models.hf_loader``):
  the largest file it reads, plus the largest tensor in the load dtype, plus one 16 MiB block
  of rows; ``file_peak_mb`` / ``anon_peak_mb``: the largest file-backed (the mapped file) and
  anonymous RSS a 10 ms poller saw during the first load, each relative to its start;
- ``s_per_gb``: load wall seconds per GB of checkpoint, the first load of a fresh process
  (it compiles the layer update once per parameter shape); ``s_per_gb_again``: the second
  load. The files were just written, so they are in the page cache: these are warm-cache
  rates, not the disk's.

Cases: the shards onto one device, the shards onto a 2 x 2 mesh of fake CPU devices (each
device receives only its shard; replicated norms are the only duplicates), and the single
file onto one device (there the "shard" is the whole model); each with glibc's malloc as
shipped and with a fixed mmap threshold (``MALLOC``). Writes
``benchmarks/results/load-*.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import common

# Qwen3-0.6B's widths; --layers and --vocab set the size (28 layers, 151936 rows in the real one).
QWEN3_SHAPE = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
MB = 1e6
BLOCK_BYTES = 16 * 2**20  # coevo_jax.models.hf_loader._BLOCK_BYTES: rows read at a time
# glibc as shipped, and with a fixed mmap threshold: by default glibc raises the threshold
# to the size of the last large block freed (up to 32 MiB), so later blocks come from the
# heap, where freed space between live blocks stays in the RSS; fixed, every block of 64 KiB
# or more is its own mapping, returned on free, and the RSS follows live memory.
MALLOC = {"glibc default": {}, "mmap >= 64 KiB": {"MALLOC_MMAP_THRESHOLD_": "65536"}}

# ----------------------------------------------------------------------------- child process


def _status_kb(field: str) -> int:
    """A ``kB`` field (``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile``) of /proc/self/status."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> None:
    """Hands freed heap back to the OS (glibc's ``malloc_trim``), so that the RSS counts only
    live memory, then resets this process's ``VmHWM`` to that RSS (Linux >= 4.0)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the baseline may include freed heap
        pass
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


class _Poller(threading.Thread):
    """Samples RssAnon and RssFile every 10 ms; keeps the maxima."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.anon_kb, self.file_kb = threading.Event(), 0, 0

    def run(self):
        while not self.stop.is_set():
            self.anon_kb = max(self.anon_kb, _status_kb("RssAnon"))
            self.file_kb = max(self.file_kb, _status_kb("RssFile"))
            time.sleep(0.01)


def child(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Loads ``spec["path"]`` once (``spec["mesh"]``: ``[data, fsdp, tensor]`` or None) and
    measures it; runs in a fresh process so the high-water mark is this load's alone."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from coevo_jax.models.loading import load
    from coevo_jax.parallel import make_mesh

    mesh = make_mesh(*spec["mesh"]) if spec["mesh"] else None
    dtype = jnp.dtype(spec["dtype"])
    # warm: the loader's jitted layer update and the allocators, on a throwaway array
    jax.block_until_ready(jnp.zeros((4, 4), dtype) + 1)
    np.zeros(1)
    _reset_peak()
    base_kb, anon0, file0 = _status_kb("VmRSS"), _status_kb("RssAnon"), _status_kb("RssFile")
    poller = _Poller()
    poller.start()
    t0 = time.perf_counter()
    model, _ = load(spec["path"], dtype=dtype, mesh=mesh, progress=False)
    jax.block_until_ready(model.params)
    seconds = time.perf_counter() - t0
    poller.stop.set()
    poller.join()
    peak_kb = _status_kb("VmHWM")
    leaves = jax.tree.leaves(model.params)
    placed = sum(s.data.nbytes for x in leaves for s in x.addressable_shards)
    devices = len(leaves[0].sharding.device_set)
    del model, leaves
    # again, the layer updates compiled and the allocator warm: the loader's own cost
    _reset_peak()
    base_again_kb = _status_kb("VmRSS")
    t0 = time.perf_counter()
    jax.block_until_ready(load(spec["path"], dtype=dtype, mesh=mesh, progress=False)[0].params)
    seconds_again = time.perf_counter() - t0
    peak_again_kb = _status_kb("VmHWM")
    return {
        "seconds": seconds,
        "seconds_again": seconds_again,
        "peak_mb": (peak_kb - base_kb) * 1024 / MB,
        "peak_mb_again": (peak_again_kb - base_again_kb) * 1024 / MB,
        "anon_peak_mb": (poller.anon_kb - anon0) * 1024 / MB,
        "file_peak_mb": (poller.file_kb - file0) * 1024 / MB,
        "placed_mb": placed / MB,
        "devices": devices,
    }


# ----------------------------------------------------------------------------- parent


def _write_model(root: Path, hf: dict[str, Any], shard_size: str) -> tuple[Path, Path, dict]:
    """Writes one random bf16 model as shards and as one file; returns both dirs and sizes."""
    import ml_dtypes
    import numpy as np

    from coevo_jax.models import ModelConfig, param_shapes
    from coevo_jax.models.hf_export import save_hf

    cfg = ModelConfig.from_hf_dict(hf)
    rng = np.random.default_rng(0)

    def draw(shape):
        return (0.02 * rng.standard_normal(shape, np.float32)).astype(ml_dtypes.bfloat16)

    shapes = param_shapes(cfg)
    params = {
        k: ({n: draw(s) for n, s in v.items()} if k == "layers" else draw(v))
        for k, v in shapes.items()
    }
    sharded = save_hf(params, cfg, root / "sharded", max_shard_size=shard_size, progress=False)
    single = save_hf(params, cfg, root / "single", max_shard_size="1000GB", progress=False)
    # a checkpoint tensor is one layer of a stacked parameter, or an unstacked one whole
    elements = [int(np.prod(s[1:])) for s in shapes["layers"].values()]
    elements += [int(np.prod(s)) for k, s in shapes.items() if k != "layers"]
    files = sorted(sharded.glob("*.safetensors"))
    sizes = {
        "total_bytes": sum(f.stat().st_size for f in files),
        "files": len(files),
        "largest_file_bytes": max(f.stat().st_size for f in files),
        "single_file_bytes": (single / "model.safetensors").stat().st_size,
        "largest_tensor_bf16_bytes": 2 * max(elements),
        "params": sum(
            x.size for v in params.values() for x in (v.values() if isinstance(v, dict) else [v])
        ),
    }
    return sharded, single, sizes


def _run_child(spec: dict[str, Any], devices: int, malloc_env: dict[str, str]) -> dict[str, Any]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", **malloc_env)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_load", "--child", json.dumps(spec)],
        cwd=common.ROOT.parent,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 layers, vocab 4096, 8MB shards")
    ap.add_argument("--layers", type=int, default=8, help="decoder blocks (8)")
    ap.add_argument("--vocab", type=int, default=32768, help="vocabulary rows (32768)")
    ap.add_argument("--shard-size", default="100MB", help="max_shard_size of the shards (100MB)")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return {}
    if args.quick:
        args.layers, args.vocab, args.shard_size = 2, 4096, "8MB"

    import jax  # noqa: F401  (machine_info reports the jax version when it is imported)

    hf = dict(QWEN3_SHAPE, num_hidden_layers=args.layers, vocab_size=args.vocab)
    work = Path(tempfile.mkdtemp(prefix="bench_load-"))
    try:
        sharded, single, sizes = _write_model(work, hf, args.shard_size)
        scale = 2 if args.dtype == "float32" else 1  # bf16 on disk
        cases = [  # (name, directory, mesh axes, devices, the largest file it reads)
            ("shards, 1 device", sharded, None, 1, sizes["largest_file_bytes"]),
            (
                "shards, mesh 2x2 (4 fake CPU devices)",
                sharded,
                [1, 2, 2],
                4,
                sizes["largest_file_bytes"],
            ),
            ("one file, 1 device", single, None, 1, sizes["single_file_bytes"]),
        ]
        runs = []
        for (name, path, mesh, devices, file_bytes), (malloc, malloc_env) in itertools.product(
            cases, MALLOC.items()
        ):
            spec = {"path": str(path), "mesh": mesh, "dtype": args.dtype}
            r = _run_child(spec, devices, malloc_env)
            bound = file_bytes + scale * sizes["largest_tensor_bf16_bytes"] + BLOCK_BYTES
            r.update(
                case=name,
                malloc=malloc,
                bound_mb=bound / MB,
                overhead_mb=r["peak_mb"] - r["placed_mb"],
                overhead_mb_again=r["peak_mb_again"] - r["placed_mb"],
                s_per_gb=r["seconds"] / (sizes["total_bytes"] / 1e9),
                s_per_gb_again=r["seconds_again"] / (sizes["total_bytes"] / 1e9),
            )
            runs.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    config = {
        "model": f"random Qwen3-shaped ({args.layers} layers, hidden 1024, vocab {args.vocab}), "
        "bf16 on disk",
        "load_dtype": args.dtype,
        "shard_size": args.shard_size,
        "checkpoint": sizes,
        "quick": args.quick,
        "bound": "largest file read + largest tensor in the load dtype + 16 MiB row block",
    }
    out = common.write_result("load", {"config": config, "figures": {"runs": runs}})
    cols = ["case", "malloc", "s_per_gb", "s_per_gb_again", "peak_mb", "placed_mb"]
    cols += ["overhead_mb", "overhead_mb_again", "bound_mb", "file_peak_mb"]
    print(common.format_table(runs, cols))
    print(
        f"checkpoint {sizes['total_bytes'] / MB:.0f} MB in {sizes['files']} shards "
        f"(largest {sizes['largest_file_bytes'] / MB:.0f} MB), largest tensor "
        f"{scale * sizes['largest_tensor_bf16_bytes'] / MB:.0f} MB as {args.dtype}"
    )
    print(f"wrote {out}")
    return {"config": config, "figures": runs, "path": str(out)}


if __name__ == "__main__":
    main()
