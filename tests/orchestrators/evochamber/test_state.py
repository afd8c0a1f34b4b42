import dataclasses

import numpy as np
import pytest

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.state import (
    Agent,
    ChamberState,
    apply_event,
    apply_lifecycle,
    b64_to_bytes,
    ewma,
    init_state,
    pair_key,
    replay,
    update_competence,
    update_synergy,
    vec_to_b64,
    vec_to_bytes,
)

CFG = EvoChamberConfig(pool_size=4, alpha=0.3, beta=0.2, prune_window=3)


def task_event(team=("a00", "a01", "a02"), reward=1.0, scores=(1.0, 0.0, 1.0), niche="x", **kw):
    ev = {
        "type": "task",
        "step": 0,
        "task_id": "t0",
        "niche": niche,
        "team": list(team),
        "structure": "voting",
        "reward": reward,
        "member_scores": list(scores),
        "task_key": vec_to_b64(np.array([1.0, 0.0], np.float32)),
        "reflections": [],
        "bank": None,
        "codream": None,
        "counters": {},
    }
    ev.update(kw)
    return ev


def test_ewma_hand_values():
    assert ewma(0.5, 1.0, 0.3) == pytest.approx(0.65)
    assert ewma(0.65, 0.0, 0.3) == pytest.approx(0.455)


def test_update_competence_eq2_and_exposure():
    a = Agent("a00", "p")
    a = update_competence(a, "x", 1.0, CFG)
    assert a.q["x"] == pytest.approx(0.65) and a.n["x"] == 1
    a = update_competence(a, "x", 0.0, CFG)
    assert a.q["x"] == pytest.approx(0.455) and a.n["x"] == 2
    assert a.competence("y", CFG.q_init) == 0.5 and a.exposure("y") == 0 and a.exposure() == 2


def test_update_synergy_eq6_symmetric_pairs():
    s = update_synergy({}, ["a02", "a00", "a01"], "x", 1.0, CFG)
    assert set(s) == {("a00", "a02", "x"), ("a01", "a02", "x"), ("a00", "a01", "x")}
    assert all(v == pytest.approx(0.6) for v in s.values())  # 0.8 * 0.5 + 0.2 * 1
    s = update_synergy(s, ["a00", "a01", "a03"], "x", 0.0, CFG)
    assert s[pair_key("a01", "a00", "x")] == pytest.approx(0.48)
    assert s[pair_key("a03", "a00", "x")] == pytest.approx(0.4)


def test_vectors_round_trip_exactly():
    v = np.random.default_rng(0).normal(size=17).astype(np.float32)
    b = vec_to_bytes(v)
    assert b64_to_bytes(vec_to_b64(v)) == b
    np.testing.assert_array_equal(np.frombuffer(b, "<f4"), v)


def test_apply_task_team_credit_hand_values():
    s0 = init_state(CFG)
    s1 = apply_event(s0, task_event(), CFG)
    assert s1.step == 1 and s1.niches == ("x",) and s1.niche_counts == {"x": 1}
    for m in ("a00", "a01", "a02"):
        assert s1.agents[m].q["x"] == pytest.approx(0.65) and s1.agents[m].n["x"] == 1
    assert s1.agents["a01"].recent == (0.0,) and s1.agents["a00"].recent == (1.0,)
    assert s1.agents["a03"] is s0.agents["a03"]  # untouched agents are shared, not copied
    assert s1.sigma[("a00", "a01", "x")] == pytest.approx(0.6)
    assert s0.step == 0 and s0.agents["a00"].q == {}  # the old state is unchanged


def test_apply_task_individual_credit():
    cfg = dataclasses.replace(CFG, credit="individual")
    s1 = apply_event(init_state(cfg), task_event(), cfg)
    assert s1.agents["a01"].q["x"] == pytest.approx(0.35)
    assert s1.agents["a00"].q["x"] == pytest.approx(0.65)


def test_recent_window_is_truncated():
    s = init_state(CFG)
    for r in (1.0, 0.0, 1.0, 0.0):
        s = apply_event(s, task_event(scores=(r, r, r)), CFG)
    assert s.agents["a00"].recent == (0.0, 1.0, 0.0)


def test_apply_task_archive_bank_and_codream_writes():
    ev = task_event(
        reflections=[
            {"agent": "a00", "lesson": "L0", "insight": "I0"},
            {"agent": "a01", "lesson": None, "insight": None},
        ],
        bank={
            "key": vec_to_b64(np.ones(3, np.float32)),
            "team_profile": [0.5, 0.5, 0.5],
            "task_profile": "x / math",
            "structure": "debate",
            "outcome": 1.0,
            "note": "n",
        },
        codream={
            "reason": "low_reward",
            "insights": [
                {
                    "giver": "a00",
                    "text": "S",
                    "level": "subdomain",
                    "niche": "y",
                    "recipients": ["a03"],
                },
                {
                    "giver": "a01",
                    "text": "C",
                    "level": "cross-domain",
                    "niche": "x",
                    "recipients": ["a02", "a03"],
                },
            ],
        },
        counters={"structure_fallback": 1},
    )
    s = apply_event(init_state(CFG), ev, CFG)
    assert [e.text for e in s.agents["a00"].lessons["x"]] == ["L0"]
    assert [e.text for e in s.agents["a00"].meta] == ["I0"]
    assert s.agents["a01"].lessons == {} and s.agents["a01"].meta == ()
    assert [e.text for e in s.agents["a03"].lessons["y"]] == ["S"]
    assert s.agents["a03"].lessons["y"][0].source == "codream:a00"
    assert [e.text for e in s.agents["a03"].meta] == ["C"] and [
        e.text for e in s.agents["a02"].meta
    ] == ["C"]
    assert len(s.bank) == 1 and s.bank[0].structure == "debate" and s.bank[0].step == 0
    assert s.counters == {"structure_fallback": 1}


def test_apply_task_rejects_unknown_member():
    with pytest.raises(ValueError, match="not in the pool"):
        apply_event(init_state(CFG), task_event(team=("a00", "a01", "zz")), CFG)


def _state_with(**agents):
    return ChamberState(
        step=0,
        agents={k: dataclasses.replace(v, name=k) for k, v in agents.items()},
        niches=("x",),
        next_agent=len(agents),
    )


def test_lifecycle_merge_weighted_and_prune_and_fork_and_genesis():
    s = _state_with(
        a00=Agent("", "p", q={"x": 0.8}, n={"x": 6}, meta=()),
        a01=Agent("", "p", q={"x": 0.7}, n={"x": 4}),
        a02=Agent("", "p"),
        a03=Agent("", "p"),
    )
    m = apply_lifecycle(s, {"op": "merge", "keep": "a00", "drop": "a01"}, CFG)
    assert m.agents["a00"].q["x"] == pytest.approx((6 * 0.8 + 4 * 0.7) / 10)
    assert m.agents["a00"].n["x"] == 10 and "a01" not in m.agents and m.retired == ("a01",)
    p = apply_lifecycle(s, {"op": "prune", "agent": "a02"}, CFG)
    assert list(p.agents) == ["a00", "a01", "a03"] and p.counters == {"lifecycle_prune": 1}
    f = apply_lifecycle(
        s, {"op": "fork", "parent": "a00", "child": "a04", "persona": "q", "niche": "x"}, CFG
    )
    assert (
        f.agents["a04"].q == {"x": 0.8}
        and f.agents["a04"].persona == "q"
        and f.agents["a04"].parent == "a00"
    )
    assert f.agents["a00"].forked == ("x",) and f.next_agent == 5
    g = apply_lifecycle(
        s, {"op": "genesis", "parent": "a01", "child": "a04", "persona": "g", "niche": "y"}, CFG
    )
    assert g.agents["a04"].q == {} and g.agents["a04"].specialized == ("y",)
    with pytest.raises(ValueError, match="already used"):
        apply_lifecycle(
            f, {"op": "fork", "parent": "a00", "child": "a04", "persona": "q", "niche": "x"}, CFG
        )
    with pytest.raises(ValueError, match="unknown lifecycle op"):
        apply_lifecycle(s, {"op": "explode"}, CFG)


def test_replay_folds_events():
    evs = [
        task_event(),
        {"type": "lifecycle", "op": "prune", "agent": "a03"},
        task_event(team=("a02", "a01", "a00"), reward=0.0),
    ]
    s = init_state(CFG)
    for e in evs:
        s = apply_event(s, e, CFG)
    assert replay(evs, CFG) == s
    with pytest.raises(ValueError, match="unknown event type"):
        apply_event(s, {"type": "nope"}, CFG)
