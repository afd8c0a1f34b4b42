"""Runs the tiny closed loop; launched by ``test_multihost`` as one process of a
``jax.distributed`` run (or alone, as the single-process reference).

Usage: ``python -m tests.train._multihost_run RUN_DIR ROUNDS [--resume] [key=value ...]``
with the ``JAX_*`` variables of a multi-process launch set by the caller. It runs
``Trainer.run`` (what ``coevo train`` runs: scheduled checkpoints, every process taking part
in each save) without plots, and on a dead peer exits as ``coevo train`` does.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv: list[str]) -> int:
    from coevo_jax.parallel import initialize_distributed

    initialize_distributed()

    import jax

    from coevo_jax._config import apply_overrides, from_dict, to_dict
    from coevo_jax.train.config import TrainConfig
    from coevo_jax.train.distributed import PeerLost, exit_for_peer_loss
    from tests.train._tiny import tiny_config, tiny_trainer

    run_dir, rounds, rest = argv[0], int(argv[1]), argv[2:]
    resume = "--resume" in rest
    overrides = [a for a in rest if a != "--resume"]
    cfg = from_dict(TrainConfig, apply_overrides(to_dict(tiny_config(rounds=rounds)), overrides))
    tr = tiny_trainer(cfg, run_dir)
    try:
        if resume:
            assert tr.restore(), "nothing to resume"
            print(f"process {jax.process_index()}: resumed after round {tr.round}", flush=True)
        tr.run()
    except PeerLost as e:
        exit_for_peer_loss(e)
    finally:
        tr.close()
    print(
        f"process {jax.process_index()} of {jax.process_count()}: done, devices {jax.device_count()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
