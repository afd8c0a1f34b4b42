"""Runs the tiny closed loop with a checkpoint every round; ``test_kill_resume`` SIGKILLs it.

Usage: ``python -m tests.train._kill_run RUN_DIR ROUNDS``.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def build(run_dir: str, rounds: int):
    from coevo_jax.train.loop import Trainer
    from tests.train._tiny import tiny_backbone, tiny_records
    from tests.train.test_loop import reward_has_digit_char, tiny_config

    cfg = tiny_config(rounds=rounds, checkpoint_every=1, keep_checkpoints=2)
    return Trainer(
        cfg,
        run_dir,
        backbone=tiny_backbone(),
        records=tiny_records(),
        reward_fn=reward_has_digit_char,
        progress=False,
    )


if __name__ == "__main__":
    tr = build(sys.argv[1], int(sys.argv[2]))
    tr.run()
    tr.close()
