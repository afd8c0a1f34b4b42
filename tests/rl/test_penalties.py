"""DAPO soft overlong penalty against TRL 1.16's ``get_soft_overlong_punishment``."""

import numpy as np
import pytest

from coevo_jax.rl.penalties import soft_overlong_penalty


def test_piecewise_values():
    got = np.asarray(soft_overlong_penalty([10, 80, 90, 100, 101], 100, 20))
    np.testing.assert_allclose(got, [0.0, 0.0, -0.5, -1.0, -1.0])
    np.testing.assert_allclose(np.asarray(soft_overlong_penalty([100, 101], 100, 0)), [0.0, -1.0])
    with pytest.raises(ValueError):
        soft_overlong_penalty([1], 10, 11)


@pytest.mark.oracle
def test_matches_trl():
    pytest.importorskip("torch", reason="TRL oracle needs torch")
    pytest.importorskip("trl", reason="TRL oracle needs trl==1.16.0")
    from trl.rewards import get_soft_overlong_punishment

    lengths = np.arange(0, 140)
    for max_len, cache in [(100, 20), (128, 1), (64, 64)]:
        theirs = get_soft_overlong_punishment(max_len, cache)([[0] * n for n in lengths])
        np.testing.assert_allclose(
            np.asarray(soft_overlong_penalty(lengths, max_len, cache)), theirs, rtol=1e-6
        )
