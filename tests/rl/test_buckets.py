"""Completion-length buckets: widths, needed lengths, row order, bucket choice."""

import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.rl import buckets


def test_bucket_widths():
    assert buckets.bucket_widths(192, 4) == (0, 48, 96, 144, 192)
    assert buckets.bucket_widths(10, 3) == (0, 4, 7, 10)
    assert buckets.bucket_widths(7, 1) == (0, 7)
    # More buckets than columns: no duplicate widths.
    assert buckets.bucket_widths(2, 4) == (0, 1, 2)
    with pytest.raises(ValueError, match="K >= 1"):
        buckets.bucket_widths(8, 0)


def test_chooses_width_needs_two_nonzero_widths():
    assert buckets.chooses_width(buckets.bucket_widths(192, 4))
    assert buckets.chooses_width(buckets.bucket_widths(2, 4))  # (0, 1, 2)
    assert not buckets.chooses_width(buckets.bucket_widths(192, 1))
    assert not buckets.chooses_width(buckets.bucket_widths(1, 4))  # (0, 1)


def test_needed_lengths_counts_to_the_last_counted_token():
    mask = jnp.asarray(
        [[1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    )
    agents = jnp.asarray([0, 1, 2, 3, -1])
    # A gap inside a row does not shorten it; an agent's empty row still needs one column
    # (its sequence metrics count it); a padding row (agent -1) needs nothing.
    np.testing.assert_array_equal(buckets.needed_lengths(mask, agents), [3, 4, 1, 5, 0])
    assert buckets.needed_lengths(mask.astype(jnp.float32), agents).dtype == jnp.int32


def test_longest_first_is_stable():
    order = buckets.longest_first(jnp.asarray([3, 5, 0, 5, 3, 1]))
    np.testing.assert_array_equal(order, [1, 3, 0, 4, 5, 2])


@pytest.mark.parametrize(("need", "index"), [(0, 0), (1, 1), (48, 1), (49, 2), (144, 3), (192, 4)])
def test_bucket_index_is_the_narrowest_width_that_fits(need, index):
    widths = buckets.bucket_widths(192, 4)
    assert int(buckets.bucket_index(jnp.int32(need), widths)) == index


def test_plan_orders_rows_and_picks_each_micro_batch_width():
    lengths = jnp.asarray([3, 8, 0, 1, 6, 0], jnp.int32)
    order, index = buckets.plan(lengths, 3, buckets.bucket_widths(8, 4))
    np.testing.assert_array_equal(order, [1, 4, 0, 3, 2, 5])
    # Micro-batches (8, 6), (3, 1), (0, 0) -> widths 8, 4, 0 of (0, 2, 4, 6, 8).
    np.testing.assert_array_equal(index, [4, 2, 0])
