import jax.numpy as jnp
import numpy as np

from coevo_jax.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


def test_relative_run_directory_round_trip(tmp_path, monkeypatch):
    """`coevo train --out runs/x` passes a relative path; orbax alone would refuse it."""
    monkeypatch.chdir(tmp_path)
    tree = {"a": jnp.arange(3.0), "b": (jnp.ones((2, 2), jnp.int32),)}
    for r in (1, 2, 3):
        save_checkpoint("runs/x/checkpoints", r, tree, {"round": r}, keep=2)
    path = latest_checkpoint("runs/x/checkpoints")
    assert path.name == "round_000003"
    back, host = load_checkpoint(path, tree)
    np.testing.assert_array_equal(back["a"], tree["a"])
    assert host == {"round": 3}
    assert sorted(p.name for p in (tmp_path / "runs/x/checkpoints").glob("round_*")) == [
        "round_000002",
        "round_000003",
    ]


def test_a_kill_before_latest_is_updated_resumes_from_the_newer_checkpoint(tmp_path):
    """The round directory is published before ``LATEST``; a kill between the two leaves
    ``LATEST`` on the previous round, and resume must still take the newer, complete one
    (seen in the SIGKILL test: the run resumed at round 1 although round 2 was on disk)."""
    tree = {"a": jnp.arange(3.0)}
    for r in (1, 2):
        save_checkpoint(tmp_path, r, tree, {"round": r})
    (tmp_path / "LATEST").write_text("round_000001")
    assert latest_checkpoint(tmp_path).name == "round_000002"
    # an unfinished temporary directory is never taken
    (tmp_path / ".tmp_round_x" / "arrays").mkdir(parents=True)
    (tmp_path / "round_000003").mkdir()
    assert latest_checkpoint(tmp_path).name == "round_000002"
