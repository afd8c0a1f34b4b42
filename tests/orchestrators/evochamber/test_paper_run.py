"""EvoChamber against hand-computed numbers, and the paper's scoring of code disagreement."""

import dataclasses

import pytest

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.embed import HashEmbedder
from coevo_jax.orchestrators.evochamber.loop import Runtime, run_stream
from coevo_jax.orchestrators.evochamber.scripted import ScriptedLLM, boxed_reward, make_records
from coevo_jax.orchestrators.evochamber.state import init_state, pair_key


class TableLLM(ScriptedLLM):
    """Correct exactly where ``table[(agent, task_id)]`` says so."""

    def __init__(self, records, table):
        super().__init__(records, {})
        self.table = table

    def correct(self, agent, record):
        return self.table.get((agent, record["id"]), False)


def _seeded_state(cfg):
    """a00..a03 on niche "alg" with q = .9/.6/.5/.2 and exposure n = 5/3/0/2."""
    s = init_state(cfg)
    agents = dict(s.agents)
    for (name, a), q, n in zip(agents.items(), (0.9, 0.6, 0.5, 0.2), (5, 3, 0, 2), strict=True):
        agents[name] = dataclasses.replace(a, q={"alg": q}, n={"alg": n})
    return dataclasses.replace(s, agents=agents, niches=("alg",), niche_counts={"alg": 10})


def test_scripted_run_hand_computed_competence_synergy_team_and_insights():
    cfg = EvoChamberConfig(pool_size=4, alpha=0.5, beta=0.5, tau=1000, leadlearn_note=False)
    recs = make_records(["alg"], 2)
    # task 0: only a00 answers right; task 1: nobody does
    llm = TableLLM(recs, {("a00", "alg-0"): True})
    res = run_stream(
        recs,
        Runtime(llm, boxed_reward, HashEmbedder(32), cfg),
        state=_seeded_state(cfg),
        progress=False,
    )
    ev0, ev1 = res.events
    # Task 0 team. One niche, so every competence vector is 1-D and omega = 1 for all pairs.
    #   anchor = argmax q = a00 (0.9)
    #   complement = q + 0.5 sigma(i, a00) + 0.5 (1 - omega): a01 .6+.25 = .85,
    #     a02 .5+.25 = .75, a03 .2+.25 = .45 -> a01
    #   scout = 1/(1 + n) + 0.5 (1 - mean omega): a02 1/1 = 1, a03 1/3 -> a02
    assert ev0["team"] == ["a00", "a01", "a02"] and ev0["structure"] == "voting"
    # voting: three different answers, the tie goes to the anchor: solved, r = 1
    assert (ev0["reward"], ev0["solved"], ev0["member_scores"]) == (1.0, True, [1.0, 0.0, 0.0])
    # CoDream: mean 1/3 < 0.5. a00 succeeded, so a01 and a02 contrast against it; every
    # proposal carries a00's approach: a00 gives all three insights.
    cd = ev0["codream"]
    assert cd["reason"] == "low_reward" and "skipped" not in cd
    assert [(i["giver"], i["author"]) for i in cd["insights"]] == [
        ("a00", "a00"),
        ("a00", "a01"),
        ("a00", "a02"),
    ]
    # after task 0's update q = .95/.8/.75/.2 (median .775): a02 and a03 consume
    assert all(i["recipients"] == ["a02", "a03"] for i in cd["insights"])

    # Task 1: q a00 .95, a01 .8, a02 .75, a03 .2; sigma(a00, a01) = sigma(a00, a02) = .75
    #   complement: a01 .8 + .375 = 1.175, a02 .75 + .375 = 1.125, a03 .2 + .25 = .45 -> a01
    #   scout: a02 1/(1+1) = .5, a03 1/(1+2) = .33 -> a02
    assert ev1["team"] == ["a00", "a01", "a02"]
    assert (ev1["reward"], ev1["solved"], ev1["member_scores"]) == (0.0, False, [0.0, 0.0, 0.0])
    # nobody succeeded: no contrast against a failed teammate, no CoDream call at all
    assert ev1["codream"] == {"reason": "low_reward", "skipped": "no_success", "insights": []}
    # every CoDream call is task 0's: reflect 3, contrast 2, imagine 3, debate 3, crystallize 3
    assert sum(r.tag.startswith("codream") for r in llm.calls) == 3 + 2 + 3 + 3 + 3

    st = res.state
    # competence, eq. 2 with alpha = .5 on the team reward: task 0 (r=1) then task 1 (r=0)
    want_q = {"a00": 0.475, "a01": 0.4, "a02": 0.375, "a03": 0.2}
    assert {a: st.agents[a].q["alg"] for a in want_q} == pytest.approx(want_q)
    assert {a: st.agents[a].n["alg"] for a in want_q} == {"a00": 7, "a01": 5, "a02": 2, "a03": 2}
    # synergy, eq. 6 with beta = .5 from q_init .5: .5 -> .75 -> .375 for the three pairs
    for i, j in (("a00", "a01"), ("a00", "a02"), ("a01", "a02")):
        assert st.sigma[pair_key(i, j, "alg")] == pytest.approx(0.375)
    assert pair_key("a00", "a03", "alg") not in st.sigma
    # insight routing: the consumers hold a00's three insights, nobody else holds any
    for a in ("a00", "a01", "a02", "a03"):
        got = [e for e in st.agents[a].lessons.get("alg", ()) if e.source.startswith("codream")]
        assert [e.source for e in got] == (["codream:a00"] * 3 if a in ("a02", "a03") else [])


class CodeLLM(ScriptedLLM):
    """Writes ``programs[agent]`` for every solution call."""

    def __init__(self, records, programs):
        super().__init__(records, {})
        self.programs = programs

    def _answer(self, agent, rec):
        return f"```python\n{self.programs[agent]}\n```"


ADD = {
    "id": "c0",
    "class": "code",
    "niche": "mbpp",
    "problem": "[c0] Write add(a, b) returning the sum.",
    "fn_name": "add",
    "test_cases": {"asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]},
}


def _run_with(programs):
    """One code task under the default (paper) scoring."""
    from coevo_jax.orchestrators.evochamber.loop import default_reward_fn

    cfg = EvoChamberConfig(pool_size=3, min_pool=3, tau=1000, leadlearn_note=False)
    rt = Runtime(CodeLLM([ADD], programs), default_reward_fn(), HashEmbedder(32), cfg)
    return run_stream([ADD], rt, progress=False).events[0]


def test_code_disagreement_is_by_test_results_not_text():
    same = {
        "a00": "def add(a, b):\n    return a + b",
        "a01": "def add(x, y):\n    total = y + x\n    return total",
        "a02": "def add(a, b):\n    return sum([a, b])",
    }
    ev = _run_with(same)
    assert ev["metric"] == "pass@1" and ev["solved"]
    assert ev["answer_keys"] == ["tests:11"] * 3
    assert ev["codream"] is None  # three different texts, one outcome: no CoDream
    half = dict(same, a02="def add(a, b):\n    return abs(a) + abs(b)")  # fails add(-1, 1)
    ev = _run_with(half)
    k = ev["team"].index("a02")
    assert ev["answer_keys"][k] == "tests:10"
    assert ev["codream"]["reason"] == "disagreement"
    # partial credit is kept apart: a02 passed half the tests but did not solve the task
    assert ev["member_scores"][k] == 0.0 and ev["member_partial"][k] == 0.5
