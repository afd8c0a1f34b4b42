"""``coevo train``: run (or resume) a CERA-MoA training run; ``coevo configs``: the bundled
run configs.

The loop, JAX and the config dataclasses are imported when a command runs, not when the parser
is built (``coevo --help`` stays fast; see ``coevo_jax.cli``).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from coevo_jax._config import bundled_configs, config_description, resolve_config

DEFAULT_CONFIG = "cpu_default"


def register(sub: argparse._SubParsersAction) -> None:
    _register_train(sub)
    _register_configs(sub)


def _register_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help=f"run CERA-MoA co-evolving training (default config: {DEFAULT_CONFIG}, on CPU)",
        description="Run the CERA-MoA closed loop. With no --config, a short CPU run with the "
        "embedded SmolLM2-135M-Instruct and the offline `cpu` data mixture.",
    )
    p.add_argument(
        "--config",
        help=f"a bundled config's name ({', '.join(bundled_configs())}; `coevo configs` "
        f"describes them) or a YAML file (default: {DEFAULT_CONFIG})",
    )
    p.add_argument("--out", help="run directory (default: runs/<config name>-<time>)")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint"
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (every key, overrides applied) as YAML and exit",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. loop.rounds=4 (--print-config shows every key)",
    )
    p.set_defaults(func=main)


def _register_configs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "configs",
        help="list the bundled run configs, or print one",
        description="With no NAME, one line per config shipped in the package (its name and "
        "the first sentence of its opening comment); with NAME, the file itself.",
    )
    p.add_argument(
        "name", nargs="?", help="a bundled config (or a YAML path) to print, comments included"
    )
    p.set_defaults(func=configs_main)


def configs_main(args: argparse.Namespace) -> int:
    """``coevo configs [NAME]``."""
    if args.name:
        print(resolve_config(args.name).read_text(), end="")
        return 0
    configs = bundled_configs()
    width = max(map(len, configs), default=0)
    for name, path in configs.items():
        print(f"{name:<{width}}  {config_description(path)}")
    return 0


def _saved_config(run_dir: Path, overrides: list[str]) -> Any:
    """The config of run ``run_dir`` (its ``config.json``) with ``overrides``.

    Raises:
      SystemExit: not a run directory.
      ConfigError: the file is not JSON, or not a valid config.
    """
    from coevo_jax._config import load_data, read_saved_config
    from coevo_jax.train.config import TrainConfig

    saved = run_dir / "config.json"
    if not saved.is_file():
        raise SystemExit(f"coevo train --resume: {saved} not found (not a run directory)")
    return load_data(TrainConfig, read_saved_config(saved), str(saved), overrides)


def _config(args: argparse.Namespace) -> tuple[Any, Path]:
    """The run's config and its directory, from ``--resume`` or ``--config`` and ``--out``."""
    if args.resume:
        return _saved_config(Path(args.resume), args.overrides), Path(args.resume)
    from coevo_jax.train.config import load_config

    name = args.config or DEFAULT_CONFIG
    cfg = load_config(resolve_config(name), args.overrides)
    stem = Path(name).name.removesuffix(".yaml")
    run_dir = Path(args.out or f"runs/{stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    return cfg, run_dir


def _check_engine(cfg: Any) -> None:
    """Fails now, not after the data and the model, when the rollout engine cannot start."""
    from rollout_bridge.engines import engine_spec

    if engine_spec(cfg.rollout.engine).needs_vllm:
        from rollout_bridge.cli import require_vllm

        require_vllm(
            cfg.rollout.vllm_python,
            option="rollout.vllm_python",
            how="set rollout.vllm_python=PATH",
        )


def main(args: argparse.Namespace) -> int:
    from coevo_jax._config import to_yaml

    cfg, run_dir = _config(args)
    if args.print_config:
        print(to_yaml(cfg), end="")
        return 0
    if not args.resume and (
        (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists()
    ):
        raise SystemExit(
            f"coevo train: {run_dir} already holds a run; continue it with "
            f"`coevo train --resume {run_dir}` or choose another --out"
        )
    _check_engine(cfg)

    from coevo_jax.parallel import initialize_distributed
    from coevo_jax.parallel.mesh import configure_devices

    # JAX reads the visible GPUs and its memory share when it creates its backend, so the
    # trainer's side of a GPU split (parallel.devices) is set first.
    configure_devices(cfg.parallel.devices, cfg.parallel.memory_fraction)
    # Before anything touches a device: a multi-host launch (JAX_COORDINATOR_ADDRESS,
    # JAX_NUM_PROCESSES, JAX_PROCESS_ID or torchrun/SLURM/MPI variables) joins its peers here.
    initialize_distributed()
    from coevo_jax.train.distributed import PeerLost, exit_for_peer_loss

    trainer = _start(cfg, run_dir, progress=not args.no_progress)
    try:
        if args.resume:
            if trainer.restore():
                print(f"resumed after round {trainer.round}")
            else:
                print("no checkpoint found; starting from round 0")
        t0 = time.perf_counter()
        rows = trainer.run()
        dt = time.perf_counter() - t0
    except PeerLost as e:  # a peer died: say so and stop now, not at the shutdown barrier
        exit_for_peer_loss(e)
    finally:
        trainer.close()
    _print_summary(trainer, rows, dt, run_dir)
    return 0


def _start(cfg: Any, run_dir: Path, *, progress: bool) -> Any:
    """The run's Trainer. A run that fails to start (bad model path, unreadable data, Ctrl-C)
    leaves no directory it created behind, unless that holds a checkpoint."""
    from coevo_jax.train.loop import Trainer

    print(f"run directory: {run_dir}")
    fresh = not run_dir.exists()
    try:
        return Trainer(cfg, run_dir, progress=progress)
    except BaseException:
        if fresh and run_dir.is_dir() and not (run_dir / "checkpoints").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _print_summary(trainer: Any, rows: list[dict], dt: float, run_dir: Path) -> None:
    if rows:
        first, last = rows[0], rows[-1]
        print(
            f"done: {trainer.round} rounds in {dt:.0f} s; system reward {first['system_reward']:.3f} "
            f"(round {first['round']}) -> {last['system_reward']:.3f} (round {last['round']}); "
            f"updates per agent {last['updates']}"
        )
    print(f"metrics: {run_dir / 'metrics.jsonl'}  plots: {run_dir / 'plots'}")
