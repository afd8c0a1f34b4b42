import pytest

from coevo_jax.train.buffers import Group, LIFOBuffer


def _g(i, rewards, version=0):
    return Group(0, f"q{i}", (1, 2), ((3,), (4,)), ((-0.5,), (-0.25,)), tuple(rewards), version)


def test_pop_waits_for_full_microbatch_and_takes_most_recent():
    buf = LIFOBuffer()
    buf.push([_g(0, (0, 1)), _g(1, (1, 0))])
    assert buf.pop(3, dynamic_sampling=False) is None
    buf.push([_g(2, (0, 1))])
    rep = buf.pop(2, dynamic_sampling=False)
    assert [g.query_id for g in rep.groups] == ["q2", "q1"]
    assert [g.query_id for g in buf.items] == ["q0"]


def test_dynamic_sampling_discards_flat_groups_and_refills():
    buf = LIFOBuffer([_g(0, (0, 1)), _g(1, (1, 1)), _g(2, (1, 0)), _g(3, (0, 0))])
    rep = buf.pop(2, dynamic_sampling=True)
    assert [g.query_id for g in rep.groups] == ["q2", "q0"]
    assert rep.examined == 4 and rep.dropped_flat == 2 and rep.kept_fraction == 0.5
    assert buf.items == [] and buf.dropped_flat == 2


def test_short_pop_keeps_informative_groups():
    buf = LIFOBuffer([_g(0, (0, 1)), _g(1, (1, 1)), _g(2, (0, 0))])
    assert buf.pop(2, dynamic_sampling=True) is None
    assert [g.query_id for g in buf.items] == ["q0"]


def test_staleness_and_state_roundtrip():
    buf = LIFOBuffer([_g(0, (0, 1), version=0), _g(1, (0, 1), version=3)])
    assert buf.drop_stale(4, max_staleness=2) == 1
    back = LIFOBuffer.from_state_dict(buf.state_dict())
    assert back.items == buf.items and back.dropped_stale == 1


def test_capacity_evicts_the_oldest_groups():
    buf = LIFOBuffer(capacity=3)
    buf.push([_g(i, (0, 1)) for i in range(5)])
    assert [g.query_id for g in buf.items] == ["q2", "q3", "q4"]
    assert buf.dropped_overflow == 2
    buf.push([_g(9, (1, 0))])
    assert [g.query_id for g in buf.items] == ["q3", "q4", "q9"] and buf.dropped_overflow == 3
    back = LIFOBuffer.from_state_dict(buf.state_dict(), capacity=3)
    assert back.items == buf.items and back.dropped_overflow == 3
    assert buf.clear() == 3 and len(buf) == 0


def test_reservoir_memory_is_flat_over_1000_rounds(tmp_path):
    import tracemalloc

    import numpy as np

    from coevo_jax.train.buffers import FeatureReservoir

    res = FeatureReservoir(256, 64, seed=0)
    rng = np.random.default_rng(0)
    batch = rng.normal(size=(16, 64)).astype(np.float32)

    def rounds(n, start):
        for r in range(start, start + n):
            res.add(batch + r, np.full(16, r % 4), [f"c{r % 5}"] * 16)

    rounds(50, 0)  # the reservoir is full from round 16 on
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    rounds(950, 50)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert res.seen == 16_000 and len(res) == 256
    assert grown < 64 * 1024, grown  # one round of 16 x 64 floats alone is 4 KiB
    saved = res.save(tmp_path / "f.npz")
    assert saved.stat().st_size < 256 * 64 * 2 + 64 * 1024
    # uniform: late rounds are as present as early ones (each row survives w.p. 256/16000)
    rows = res.h[:, 0].astype(np.float32) - batch[0, 0]
    early, late = (rows < 500).sum(), (rows >= 500).sum()
    assert 80 < early < 176 and 80 < late < 176


def test_reservoir_restores_and_continues_identically(tmp_path):
    import numpy as np

    from coevo_jax.train.buffers import FeatureReservoir

    def feed(res, lo, hi):
        for r in range(lo, hi):
            res.add(np.full((4, 8), r, np.float32), np.full(4, r % 3), ["math"] * 4)

    a = FeatureReservoir(32, 8, seed=7)
    feed(a, 0, 30)
    b = FeatureReservoir.load(a.save(tmp_path / "r.npz"))
    feed(a, 30, 60)
    feed(b, 30, 60)
    for k in ("h", "agent", "cls", "seen"):
        np.testing.assert_array_equal(a.arrays()[k], b.arrays()[k])
    small = FeatureReservoir(32, 8)
    feed(small, 0, 2)
    assert len(small) == 8 and small.arrays()["h"].shape == (8, 8)
    with pytest.raises(ValueError, match=r"\[B, 8\]"):
        small.add(np.zeros((2, 3)), np.zeros(2), ["a", "b"])
