"""Runs the tiny closed loop with a checkpoint every round; ``test_kill_resume`` SIGKILLs it.

Usage: ``python -m tests.train._kill_run RUN_DIR ROUNDS``.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def build(run_dir: str, rounds: int):
    from tests.train._tiny import tiny_config, tiny_trainer

    return tiny_trainer(tiny_config(rounds=rounds, checkpoint_every=1, keep_checkpoints=2), run_dir)


if __name__ == "__main__":
    tr = build(sys.argv[1], int(sys.argv[2]))
    tr.run()
    tr.close()
