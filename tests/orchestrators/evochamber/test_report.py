import json

import pytest

from coevo_jax.orchestrators.evochamber.baselines import self_consistency, single_agent
from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.embed import HashEmbedder
from coevo_jax.orchestrators.evochamber.loop import Runtime, run_stream
from coevo_jax.orchestrators.evochamber.report import specialization_index, summarize, write_report
from coevo_jax.orchestrators.evochamber.scripted import ScriptedLLM, boxed_reward, make_records


def test_specialization_index_hand_values():
    assert specialization_index([10, 0, 0, 0], 4) == pytest.approx(1.0)
    assert specialization_index([5, 5, 5, 5], 4) == pytest.approx(0.0)
    # shares (.5, .5) over a pool of 4: HHI .5 -> (.5 - .25) / .75
    assert specialization_index({"a": 3, "b": 3}, 4) == pytest.approx(1 / 3)
    assert specialization_index([], 4) == 0.0 and specialization_index([3], 1) == 0.0


def test_summarize_hand_built_log():
    cfg = EvoChamberConfig(pool_size=4, tau=1)
    ev = lambda n, a, r, ins=None: {
        "type": "task",
        "niche": n,
        "team": [a, "z1", "z2"],
        "reward": r,
        "structure": "voting",
        "calls": 5,
        "codream": {"reason": "low_reward", "insights": ins} if ins else None,
    }
    events = [
        ev("x", "a", 1.0),
        ev("x", "a", 0.0, [{"giver": "a", "recipients": ["b", "c"]}]),
        {"type": "lifecycle", "op": "prune", "step": 2, "agent": "c"},
        ev(
            "y",
            "b",
            1.0,
            [{"giver": "b", "recipients": ["c"]}, {"giver": "a", "recipients": ["b"]}],
        ),
    ]
    s = summarize(events, cfg)
    assert s["accuracy_per_niche"] == {"x": 0.5, "y": 1.0} and s["accuracy"] == pytest.approx(2 / 3)
    assert s["anchor_counts"] == {"a": {"x": 2}, "b": {"y": 1}}
    assert s["codream_matrix"] == {"a": {"b": 2, "c": 1}, "b": {"c": 1}}
    assert s["pool_size"] == [4, 4, 3] and s["llm_calls"] == 15 and s["codream_sessions"] == 2
    assert s["specialization_index_per_niche"]["x"] == pytest.approx(1.0)
    assert s["specialization_index_over_time"][1] == pytest.approx(1.0)


def test_write_report_and_baselines(tmp_path):
    recs = make_records(["x", "y"], 6)
    skill = {"a01": {"x": 1.0}, "baseline": {"x": 1.0, "y": 0.5}}
    cfg = EvoChamberConfig(pool_size=5, tau=4)
    llm = ScriptedLLM(recs, skill, default=0.2)
    res = run_stream(recs, Runtime(llm, boxed_reward, HashEmbedder(32), cfg), progress=False)
    sa = single_agent(recs, llm, boxed_reward, cfg)
    sc = self_consistency(recs, llm, boxed_reward, cfg, k=5)
    assert sa["accuracy_per_niche"]["x"] == 1.0 and sc["accuracy_per_niche"]["x"] == 1.0
    assert len(sc["rewards"]) == 12
    s = write_report(
        res.events,
        cfg,
        tmp_path,
        baselines={"single_agent": sa, "sc@5": sc},
        counters=res.state.counters,
    )
    for f in (
        "report.json",
        "report.md",
        "accuracy_per_niche.png",
        "anchor_counts.png",
        "codream_matrix.png",
        "lifecycle.png",
        "specialization.png",
    ):
        assert (tmp_path / f).stat().st_size > 0, f
    assert json.loads((tmp_path / "report.json").read_text())["tasks"] == 12 == s["tasks"]
    md = (tmp_path / "report.md").read_text()
    # every column names its metric
    assert (
        "| niche | metric | tasks (count) | EvoChamber (metric) | EvoChamber partial credit "
        "(mean) | single_agent (metric) | sc@5 (metric) | specialization index (anchor HHI, "
        "0-1) |"
    ) in md


def test_self_consistency_majority():
    recs = [{"id": "t", "niche": "x", "class": "math", "problem": "P", "true_answer": "7"}]

    class Seq:
        def complete(self, reqs):
            return [r"\boxed{7}", r"\boxed{3}", r"\boxed{7}", r"\boxed{3}", r"\boxed{3}"][
                : len(reqs)
            ]

    cfg = EvoChamberConfig()
    assert self_consistency(recs, Seq(), boxed_reward, cfg, k=5)["rewards"] == [0.0]
    assert self_consistency(recs, Seq(), boxed_reward, cfg, k=3)["rewards"] == [1.0]
    with pytest.raises(ValueError):
        self_consistency(recs, Seq(), boxed_reward, cfg, k=0)
