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
