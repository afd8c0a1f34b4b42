"""Issue 29: the trainer's resident memory must not grow round after round.

The growth on ``configs/cpu_reference_mixture.yaml`` was freed buffers that glibc kept resident
(``coevo_jax.train.memory``); these tests check that the release works, that every round
calls it, and that nothing the loop references (device arrays, compiled executables) grows
with the number of rounds once the shapes have been seen.
"""

import subprocess
import sys
import textwrap

import jax
import pytest

import coevo_jax.train.loop as loop_mod
from coevo_jax.models import sampler
from coevo_jax.train import gap
from coevo_jax.train.memory import _malloc_trim, release_free_memory
from tests.train._tiny import tiny_config, tiny_trainer

FRAGMENT = textwrap.dedent(
    """
    import numpy as np, psutil
    from coevo_jax.train.memory import release_free_memory
    proc = psutil.Process()
    big = np.ones((16 << 20) // 8)  # freeing a 16 MiB mmap-ed block raises the mmap threshold
    del big
    blocks = [np.ones((4 << 20) // 8) for _ in range(50)]  # so these 200 MiB come from the heap
    tail = np.ones((4 << 20) // 8)  # and this one keeps them from the top of the heap
    del blocks
    before = proc.memory_info().rss
    release_free_memory()
    print((before - proc.memory_info().rss) >> 20)
    """
)


@pytest.mark.skipif(_malloc_trim() is None, reason="the C library has no malloc_trim")
def test_release_returns_freed_heap_memory_to_the_os():
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT], capture_output=True, text=True, check=True
    )
    released_mib = int(out.stdout.strip().splitlines()[-1])
    assert released_mib >= 150, out


def test_release_is_safe_to_call_repeatedly():
    for _ in range(3):
        assert release_free_memory() in (True, False)


def test_rounds_release_memory_and_hold_no_growing_state(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(loop_mod, "release_free_memory", lambda: calls.append(1) or True)
    tr = tiny_trainer(tiny_config(rounds=8, checkpoint_every=2), tmp_path)

    def held():
        return (
            len(jax.live_arrays()),
            sampler.generate_arrays._cache_size(),
            gap.recompute_logprobs._cache_size(),
            tr.system.groups[0].step_fn._cache_size(),
        )

    tr.run(rounds=3)  # every shape of this run has been compiled by now
    after_3 = held()
    tr.run(rounds=5)
    assert len(calls) == 8
    assert held() == after_3
