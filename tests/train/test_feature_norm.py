"""The router's frozen feature whitening (``router.feature_norm``) inside the trainer."""

import dataclasses

import numpy as np

from coevo_jax.router import standardization
from tests.train._tiny import tiny_config, tiny_records, tiny_trainer


def _config(norm: str, center: float = 1.0):
    cfg = tiny_config()
    # 128 tokens: the tiny prompts' own words fall inside the window the router reads
    return dataclasses.replace(
        cfg,
        router=dataclasses.replace(
            cfg.router, feature_norm=norm, max_prompt_tokens=128, feature_center=center
        ),
        data=dataclasses.replace(cfg.data, max_input_tokens=128),
    )


def test_statistics_come_from_the_training_queries_and_resume_with_the_run(tmp_path):
    tr = tiny_trainer(_config("standardize"), tmp_path / "a")
    h = tr._feature_sample()
    assert h.shape[0] == len(tiny_records())  # fewer records than norm_queries: all of them
    shift, scale = standardization(h)
    np.testing.assert_array_equal(np.asarray(tr.system.router.feature_shift), np.asarray(shift))
    np.testing.assert_array_equal(np.asarray(tr.system.router.feature_scale), np.asarray(scale))
    assert float(np.abs(np.asarray(shift)).max()) > 0  # not the identity left in place
    z = np.asarray(tr.system.router.head_input(h))
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-3)
    tr.save()
    # a trainer over other queries takes other statistics, until it restores the run's own
    other = tiny_trainer(_config("standardize"), tmp_path / "a", records=tiny_records(20)[8:])
    assert not np.array_equal(np.asarray(other.system.router.feature_shift), np.asarray(shift))
    assert other.restore()
    np.testing.assert_array_equal(np.asarray(other.system.router.feature_shift), np.asarray(shift))
    np.testing.assert_array_equal(np.asarray(other.system.router.feature_scale), np.asarray(scale))


def test_a_partly_centred_run_keeps_the_rest_of_the_mean(tmp_path):
    tr = tiny_trainer(_config("standardize", center=0.5), tmp_path)
    h = tr._feature_sample()
    shift, scale = standardization(h, center=0.5)
    np.testing.assert_array_equal(np.asarray(tr.system.router.feature_shift), np.asarray(shift))
    z = np.asarray(tr.system.router.head_input(h))
    np.testing.assert_allclose(z.mean(0), 0.5 * np.asarray(h.mean(0) * scale), rtol=1e-3, atol=1e-3)


def test_no_whitening_by_default(tmp_path):
    tr = tiny_trainer(_config("none"), tmp_path)
    assert np.all(np.asarray(tr.system.router.feature_shift) == 0)
    assert np.all(np.asarray(tr.system.router.feature_scale) == 1)


def test_a_checkpoint_without_statistics_keeps_the_ones_taken_at_start(tmp_path):
    # the layout of a run written before checkpoints held the statistics
    tiny_trainer(_config("none"), tmp_path).save()
    tr = tiny_trainer(_config("standardize"), tmp_path)
    taken = np.asarray(tr.system.router.feature_shift)
    assert tr.restore()
    np.testing.assert_array_equal(np.asarray(tr.system.router.feature_shift), taken)


def test_evaluation_scores_queries_as_training_routes_them(tmp_path):
    # the evaluation's own feature pass must go through the same whitening as training
    import jax.numpy as jnp

    from coevo_jax.eval.collect import _familiarity_fn
    from coevo_jax.router import pad_queries, route

    tr = tiny_trainer(_config("standardize"), tmp_path)
    prompts = [tr._router_prompt(i) for i in range(6)]
    want = route(tr.system.router, tr.system.query_features(prompts), train=False).f
    ids, mask = pad_queries(prompts, max_len=128, pad_id=0)
    got = _familiarity_fn(tr.system)(jnp.asarray(ids), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_whitening_sample_is_seeded_sorted_and_distinct():
    from coevo_jax.train.setup import whitening_sample

    idx = whitening_sample(1200, 256, 42)
    assert len(idx) == 256 == len(set(idx)) and idx == sorted(idx)
    assert 0 <= idx[0] and idx[-1] < 1200
    assert whitening_sample(1200, 256, 42) == idx != whitening_sample(1200, 256, 43)
    assert whitening_sample(10, 256, 42) == list(range(10))  # fewer records: all of them
