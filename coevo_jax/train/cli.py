"""``coevo train``: run (or resume) a CERA-MoA training run."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="run CERA-MoA co-evolving training (default: configs/cpu_default.yaml on CPU)",
        description="Run the CERA-MoA closed loop. With no --config, a short CPU run with the "
        "embedded SmolLM2-135M-Instruct and the offline `cpu` data mixture.",
    )
    p.add_argument("--config", help="YAML run config (default: configs/cpu_default.yaml)")
    p.add_argument("--out", help="run directory (default: runs/<config name>-<time>)")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides, e.g. loop.rounds=4"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from coevo_jax.parallel import initialize_distributed

    # Before anything touches a device: a multi-host launch (JAX_COORDINATOR_ADDRESS,
    # JAX_NUM_PROCESSES, JAX_PROCESS_ID or torchrun/SLURM/MPI variables) joins its peers here.
    initialize_distributed()

    from coevo_jax._config import apply_overrides, from_dict
    from coevo_jax.train.config import TrainConfig, load_config

    if args.resume:
        run_dir = Path(args.resume)
        saved = run_dir / "config.json"
        if not saved.is_file():
            raise SystemExit(f"coevo train --resume: {saved} not found (not a run directory)")
        cfg = from_dict(TrainConfig, apply_overrides(json.loads(saved.read_text()), args.overrides))
    else:
        cfg = load_config(args.config, args.overrides)
        name = Path(args.config).stem if args.config else "cpu_default"
        run_dir = Path(args.out or f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}")
        if (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists():
            raise SystemExit(
                f"coevo train: {run_dir} already holds a run; continue it with "
                f"`coevo train --resume {run_dir}` or choose another --out"
            )

    from coevo_jax.train.loop import Trainer

    print(f"run directory: {run_dir}")
    fresh = not run_dir.exists()
    try:
        trainer = Trainer(cfg, run_dir, progress=not args.no_progress)
    except BaseException:
        # A run that failed to start (bad model path, unreadable data) leaves no empty directory.
        if fresh and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
        raise
    try:
        if args.resume:
            if trainer.restore():
                print(f"resumed after round {trainer.round}")
            else:
                print("no checkpoint found; starting from round 0")
        t0 = time.perf_counter()
        rows = trainer.run()
        dt = time.perf_counter() - t0
    finally:
        trainer.close()
    if rows:
        first, last = rows[0], rows[-1]
        print(
            f"done: {trainer.round} rounds in {dt:.0f} s; system reward {first['system_reward']:.3f} "
            f"(round {first['round']}) -> {last['system_reward']:.3f} (round {last['round']}); "
            f"updates per agent {last['updates']}"
        )
    print(f"metrics: {run_dir / 'metrics.jsonl'}  plots: {run_dir / 'plots'}")
    return 0
