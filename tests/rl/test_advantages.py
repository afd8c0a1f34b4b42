"""Group advantages against TRL 1.16's advantage code; dynamic sampling and buffer refill."""

import numpy as np
import pytest

from coevo_jax.rl.advantages import (
    dynamic_sampling_mask,
    group_advantages,
    refill_from_lifo,
    refill_informative,
)


def _trl_advantages(rewards: np.ndarray, scale: str) -> np.ndarray:
    """TRL 1.16 ``_generate_and_score_completions``'s sum_then_normalize branch, one reward fn."""
    import torch
    from trl.trainer.utils import nanstd

    q, g = rewards.shape
    r = torch.tensor(rewards.reshape(-1), dtype=torch.float32)
    mean = torch.nanmean(r.view(-1, g), dim=1).repeat_interleave(g, dim=0)
    if scale == "group":
        std = nanstd(r.view(-1, g), dim=1).repeat_interleave(g, dim=0)
    else:
        std = nanstd(r).expand_as(r)
    adv = r - mean
    if scale != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).numpy().reshape(q, g)


@pytest.mark.oracle
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_trl(scale):
    pytest.importorskip("torch", reason="TRL oracle needs torch")
    pytest.importorskip("trl", reason="TRL oracle needs trl==1.16.0")
    rng = np.random.default_rng(0)
    binary = rng.integers(0, 2, (16, 8)).astype(np.float32)
    binary[3] = 1.0  # all-equal group
    cont = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
    cont[2, 1] = np.nan  # unscorable completion
    cont[4, :3] = np.nan  # one finite reward left
    for rewards in (binary, cont):
        ours = np.asarray(group_advantages(rewards, scale=scale))
        np.testing.assert_allclose(ours, _trl_advantages(rewards, scale), rtol=1e-5, atol=1e-6)


def test_formula_and_ddof():
    r = np.array([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]], np.float32)
    a = np.asarray(group_advantages(r, ddof=0, eps=0.0))
    np.testing.assert_allclose(a[0], [1, -1, -1, 1], rtol=1e-6)
    np.testing.assert_allclose(a[1], 0.0)
    a1 = np.asarray(group_advantages(r))
    np.testing.assert_allclose(a1[0], (r[0] - 0.5) / (np.std(r[0], ddof=1) + 1e-4), rtol=1e-6)


def test_dynamic_sampling_mask():
    r = np.array(
        [[1, 1, 1], [0, 1, 0], [0.3, 0.3, 0.3], [np.nan, 1, np.nan], [np.nan, 0, 1]], np.float32
    )
    np.testing.assert_array_equal(
        np.asarray(dynamic_sampling_mask(r)), [False, True, False, False, True]
    )
    near = np.array([[0.5, 0.5 + 1e-7]], np.float32)
    assert not bool(dynamic_sampling_mask(near, atol=1e-6)[0])


def test_refill_informative_skips_and_reports():
    groups = [[1, 1], [0, 1], [0, 0], [1, 0], [0, 1], [1, 0]]
    res = refill_informative(groups, 3)
    assert res.kept == (1, 3, 4) and res.dropped == (0, 2)
    assert res.examined == 5 and res.kept_fraction == pytest.approx(3 / 5) and not res.short
    res = refill_informative([[1, 1], [0, 1]], 3)
    assert res.short and res.kept == (1,)
    assert refill_informative([], 2).kept_fraction == 1.0


def test_refill_from_lifo_pops_from_the_top():
    buffer = [{"id": i, "r": r} for i, r in enumerate([[0, 1], [1, 1], [1, 0], [0, 0], [1, 0]])]
    got, res = refill_from_lifo(buffer, 2, lambda g: g["r"])
    assert [g["id"] for g in got] == [4, 2]  # most recent first, group 3 dropped on the way
    assert [g["id"] for g in buffer] == [0, 1]  # untouched below the last examined
    assert res.kept_fraction == pytest.approx(2 / 3)
