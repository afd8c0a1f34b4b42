"""The router's training schedule inside the trainer (``router.update_steps``,
``router.replay_rounds``)."""

import dataclasses

import jax
import numpy as np

from tests.train._tiny import tiny_config, tiny_trainer


def _config(update_steps: int, replay_rounds: int, **loop):
    cfg = tiny_config(**loop)
    return dataclasses.replace(
        cfg,
        router=dataclasses.replace(
            cfg.router, update_steps=update_steps, replay_rounds=replay_rounds
        ),
    )


def test_steps_per_round_window_and_resume(tmp_path):
    tr = tiny_trainer(_config(3, 2, rounds=2), tmp_path)
    assert tr.system.router_replay is not None
    rows = tr.run()
    assert int(tr.system.router.step) == 2 * 3  # three Adam steps a round
    w = tr.system.router_replay
    assert int(w.rounds) == 2 and w.h.shape == (2, 4, tr.system.router.feature_shift.shape[0])
    # round k in slot k - 1 (the ring's overwriting is tests/router/test_replay.py's); each
    # served what its metrics row says it activated (no generation failed)
    for slot, row in ((0, rows[0]), (1, rows[1])):
        assert row["failures"] == 0 or row["failures"] == []
        assert np.asarray(w.served[slot]).sum(axis=0).tolist() == row["activated"]["per_agent"]
    tr.save()
    back = tiny_trainer(_config(3, 2, rounds=2), tmp_path)
    assert int(back.system.router_replay.rounds) == 0
    assert back.restore()
    for a, b in zip(jax.tree.leaves(back.system.router_replay), jax.tree.leaves(w), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_wrapped_window_resumes_exactly(tmp_path):
    # 3 rounds in a 2-round ring: slot 0 holds round 3, slot 1 round 2, and the resumed
    # window must keep that layout and its count, or the next rounds fill other slots
    tr = tiny_trainer(_config(1, 2, rounds=3), tmp_path)
    tr.run()
    w = tr.system.router_replay
    assert int(w.rounds) == 3
    tr.save()
    back = tiny_trainer(_config(1, 2, rounds=3), tmp_path)
    assert back.restore()
    for a, b in zip(jax.tree.leaves(back.system.router_replay), jax.tree.leaves(w), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_paper_schedule_keeps_no_window_and_its_checkpoint_layout(tmp_path):
    tr = tiny_trainer(_config(1, 1), tmp_path)
    assert tr.system.router_replay is None and "router_replay" not in tr.system.arrays()


def test_a_run_resumes_under_another_router_schedule(tmp_path):
    """A window this config does not use is dropped; a config that adds one starts it empty;
    a different window length keeps the most recent rounds."""
    tr = tiny_trainer(_config(3, 2, rounds=2), tmp_path)
    tr.run()
    tr.save()
    paper = tiny_trainer(_config(1, 1, rounds=2), tmp_path)
    assert paper.restore() and paper.round == 2 and paper.system.router_replay is None
    for a, b in zip(
        jax.tree.leaves(paper.system.router.params), jax.tree.leaves(tr.system.router.params), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    longer = tiny_trainer(_config(2, 4, rounds=2), tmp_path)
    assert longer.restore() and longer.system.router_replay.h.shape[0] == 4
    assert int(longer.system.router_replay.rounds) == 2
    np.testing.assert_array_equal(
        np.asarray(longer.system.router_replay.h[:2]), np.asarray(tr.system.router_replay.h)
    )
    paper.save()  # a checkpoint without a window, read by a config with one
    again = tiny_trainer(_config(3, 2, rounds=2), tmp_path)
    assert again.restore() and int(again.system.router_replay.rounds) == 0
