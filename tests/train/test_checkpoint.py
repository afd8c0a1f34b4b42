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
