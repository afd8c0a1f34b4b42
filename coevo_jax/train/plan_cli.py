"""``coevo plan``: a run's per-device memory and FLOPs, compiled on fake CPU devices.

The plan needs a process with exactly N CPU devices, and XLA reads the device count
(``--xla_force_host_platform_device_count``) once, when JAX starts. So when this process does
not have them, the command runs itself again in a subprocess with ``JAX_PLATFORMS=cpu`` and
that flag set, and passes its exit status on. Building the parser imports no JAX (see
``coevo_jax.cli``); the command imports it when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

from coevo_jax._config import bundled_configs, resolve_config

_FLAG = re.compile(r"--xla_force_host_platform_device_count=(\d+)")
_CHILD = "COEVO_PLAN_CHILD"  # set in the re-run, which must not re-run itself again


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="compile a run's programs on N fake CPU devices: per-device memory, FLOPs, "
        "collectives, and whether it fits the GPUs",
        description="Compiles, with abstract weights (nothing is allocated), the programs a "
        "run of the config calls (policy step with its reference pass, the reference pass "
        "alone, the log-prob recompute, router features and step, sampler prefill and decode) "
        "at the config's exact shapes on N fake CPU devices, and reports per device their "
        "argument, temporary and output bytes, FLOPs and collective bytes per step, and "
        "whether the planned peak fits the device memory after JAX's preallocation fraction "
        "(XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75). The config's own `parallel` mesh is "
        "planned when it has N devices, else fsdp=N. CPU-compiler figures estimate the GPU's "
        "(within about 2x). A 4B-parameter model takes minutes on 2 cores.",
    )
    p.add_argument(
        "--config",
        required=True,
        help=f"a bundled config's name ({', '.join(bundled_configs())}) or a YAML file",
    )
    p.add_argument("--devices", type=int, required=True, help="devices to plan for (N)")
    p.add_argument(
        "--device-memory-gb",
        type=float,
        default=80.0,
        help="memory of one device in GB of 1e9 bytes (default: 80)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. rl.micro_batches=16",
    )
    p.set_defaults(func=main)


def has_devices(n: int) -> bool:
    """Whether this process has (or, JAX not yet started, will have) exactly ``n`` CPU
    devices."""
    if "jax" in sys.modules:
        import jax

        return jax.default_backend() == "cpu" and len(jax.devices()) == n
    if os.environ.get("JAX_PLATFORMS") != "cpu":
        return False
    m = _FLAG.search(os.environ.get("XLA_FLAGS", ""))
    return (int(m.group(1)) if m else 1) == n


def child_env(n: int) -> dict[str, str]:
    """This process's environment for a re-run with ``n`` fake CPU devices."""
    env = dict(os.environ)
    flags = _FLAG.sub("", env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env[_CHILD] = "1"
    return env


def _rerun(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "coevo_jax", "plan", "--config", args.config]
    argv += ["--devices", str(args.devices), "--device-memory-gb", repr(args.device_memory_gb)]
    argv += (["--json"] if args.json else []) + list(args.overrides)
    return subprocess.run(argv, env=child_env(args.devices), check=False).returncode


def main(args: argparse.Namespace) -> int:
    if args.devices < 1:
        raise SystemExit(f"--devices must be >= 1, got {args.devices}")
    if args.device_memory_gb <= 0:
        raise SystemExit(f"--device-memory-gb must be > 0, got {args.device_memory_gb}")
    path = resolve_config(args.config)  # a bad name fails here, before a re-run
    if not has_devices(args.devices):
        if os.environ.get(_CHILD):
            raise SystemExit(f"could not start JAX with {args.devices} CPU devices")
        return _rerun(args)
    from coevo_jax.train.config import load_config
    from coevo_jax.train.plan import format_plan, plan_run

    cfg = load_config(path, args.overrides)
    plan = {"config": args.config, **plan_run(cfg, args.devices, args.device_memory_gb)}
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
