"""The policy-step benchmark's FLOP counts and contender pairing (the timing itself runs in
the quick suite)."""

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.bench_policy_step import (
    executed_flops,
    make_data,
    step_flops,
    torch_counterpart,
)

CFG = SimpleNamespace(
    hidden_size=64,
    intermediate_size=128,
    head_dim=16,
    num_heads=4,
    num_kv_heads=2,
    num_layers=2,
    vocab_size=100,
)


def _total(n_seq, t_len):
    return step_flops(CFG, n_seq, 8, t_len, 1, 4)["total"]


def test_full_width_without_buckets():
    data = make_data(8, 8, 32, 4, vocab=100)
    got = executed_flops(CFG, data, micro_batches=4, length_buckets=1, rank=4)
    assert got == pytest.approx(_total(8, 32))


def test_buckets_count_each_micro_batch_at_its_width():
    data = make_data(8, 8, 32, 4, vocab=100)  # odd rows stop at 24 = 3/4 of 32
    got = executed_flops(CFG, data, micro_batches=4, length_buckets=4, rank=4)
    assert got == pytest.approx(_total(4, 32) + _total(4, 24))
    # Padding rows (agent -1) sorted into a micro-batch of their own cost nothing.
    data["agent_ids"] = np.asarray([0, 1, 2, 3, 0, 1, -1, -1], np.int32)
    got = executed_flops(CFG, data, micro_batches=4, length_buckets=4, rank=4)
    assert got == pytest.approx(_total(4, 32) + _total(2, 24))


@pytest.mark.parametrize(
    ("jax_name", "torch_name"),
    [
        ("jax-fp32", "torch-trl-peft"),
        ("jax-fp32-chunk", "torch-trl-peft"),
        ("jax-mixed", "torch-trl-peft-bf16"),
        ("jax-bf16", "torch-trl-peft-bf16"),
        ("jax-fp32-remat", "torch-trl-peft-gc"),
        ("jax-mixed-remat", "torch-trl-peft-bf16-gc"),
        ("jax-mixed-remat-chunk", "torch-trl-peft-bf16-gc"),
    ],
)
def test_each_variant_is_set_against_the_torch_step_doing_its_work(jax_name, torch_name):
    # bf16 matmuls against autocast; decoder blocks recomputed against gradient checkpointing.
    assert torch_counterpart(jax_name) == torch_name
