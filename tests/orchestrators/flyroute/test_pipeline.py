import dataclasses
import math
import random

import pytest

from coevo_jax.orchestrators.flyroute.bench_data import LabeledQuery, build_benchmark
from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.distill import DISTILL_TAG
from coevo_jax.orchestrators.flyroute.pipeline import AGENT_TAG, FlyRoute
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.query import Query
from coevo_jax.orchestrators.flyroute.replay import replay

from .flyroute_fakes import ScriptedLLM, expert_for, make_records, topic_query

AGENTS = ("math", "code", "instructions", "reasoning")


def _store():
    s = ProfileStore()
    for a in AGENTS:
        s.register(a, [topic_query(a, i, f"seed{i}") for i in range(5)], f"The {a} agent.")
    return s


def _stream(n, rng=None, agents=AGENTS):
    rng = rng or random.Random(0)
    out = []
    for i in range(n):
        a = rng.choice(agents)
        out.append((Query(f"q{i}", topic_query(a, i, f"item{i}")), a))
    return out


def test_success_store_fills_with_gated_answers_only():
    s = _store()
    llm = ScriptedLLM()
    fr = FlyRoute.from_llm(s, llm, FlyRouteConfig(distill_every=1000))
    stream = _stream(40)
    for q, _ in stream:
        res = fr.step(q)
        assert res.dispatched[0] == res.route.agents[0] == expert_for(q.text)
        assert res.stored == [expert_for(q.text)]  # explored non-experts are judged 0.2
        assert set(res.dispatched) == set(res.responses) == set(res.verdicts)
    for a in AGENTS:
        gated = [e for e in s[a].successes if not e.is_seed]
        assert len(gated) == sum(g == a for _, g in stream)
        assert all(e.score == 0.9 and e.provenance["gate"] == "judge" for e in gated)
        assert all(expert_for(e.query) == a for e in gated)
    assert fr.stats["stored"] == 40 and fr.stats["explored"] > 0
    assert {r.agent for r in llm.by_tag(AGENT_TAG)} <= set(AGENTS)


def test_exploration_reaches_new_agent_only_on_relevant_queries():
    s = _store()
    for a in AGENTS:  # established agents: large stores, low uncertainty
        for i in range(30):
            s.add_success(a, topic_query(a, i, f"old{i}"), "r", 0.9)
    s.register("chem", [f"chemistry molecule bond seed{i}" for i in range(5)], "Chemistry helper.")
    llm = ScriptedLLM(router="reasoning")  # the router never picks the new agent
    fr = FlyRoute.from_llm(s, llm, FlyRouteConfig(distill_every=1000))
    relevant, irrelevant = 0, 0
    for i in range(30):
        if i % 3 == 0:
            q = Query(f"c{i}", f"chemistry of molecule number{i}")
        else:
            q = Query(f"o{i}", topic_query(AGENTS[i % 4], i, f"new{i}"))
        res = fr.step(q)
        is_rel = "chemistry" in q.text
        assert ("chem" in res.dispatched) == is_rel, (q.text, res.exploration.vplus)
        if is_rel:
            relevant += 1
            assert "chem" in res.exploration.selected and res.exploration.r["chem"] == 1.0
            assert res.stored == ["chem"]  # judged a success, so the profile learns
        else:
            irrelevant += 1
            assert res.exploration.r["chem"] == 0.0
    assert relevant == 10 and irrelevant == 20
    gated = [e for e in s["chem"].successes if not e.is_seed]
    assert len(gated) == 10 and all(e.provenance["explore"] for e in gated)


def test_distillation_triggers_every_m_successes():
    s = _store()
    llm = ScriptedLLM()
    fr = FlyRoute.from_llm(s, llm, FlyRouteConfig(distill_every=4, n_explore=0))
    distilled_at = {a: [] for a in AGENTS}
    for q, _ in _stream(60, random.Random(1)):
        res = fr.step(q)
        for a in res.distilled:
            distilled_at[a].append(s[a].n_gated)
    for a in AGENTS:
        n = s[a].n_gated
        assert distilled_at[a] == list(range(4, n + 1, 4))
        assert [v.n_successes for v in s[a].learned] == distilled_at[a]
        assert s[a].active_description.startswith("handles queries like")
    assert len(llm.by_tag(DISTILL_TAG)) == sum(len(v) for v in distilled_at.values())


def test_gold_route_is_not_part_of_the_query_type():
    assert [f.name for f in dataclasses.fields(Query)] == ["id", "text"]
    fr = FlyRoute.from_llm(_store(), ScriptedLLM())
    item = LabeledQuery(Query("x", "integral"), gold="math", domain="math")
    for bad in (item, {"id": "x", "text": "integral", "gold": "math"}, "integral"):
        with pytest.raises(TypeError, match="Query"):
            fr.step(bad)
        with pytest.raises(TypeError, match="Query"):
            fr.route([bad])


def test_gold_labels_cannot_change_what_the_pipeline_does(tmp_path):
    bench = build_benchmark(make_records(10), k=5, test_fraction=0.2)
    rng = random.Random(7)
    wrong = tuple(
        dataclasses.replace(it, gold=rng.choice(AGENTS), domain="x") for it in bench.train
    )
    runs = []
    for train in (bench.train, wrong):
        llm = ScriptedLLM()
        store = bench.register(ProfileStore())
        fr = FlyRoute.from_llm(store, llm, FlyRouteConfig(distill_every=2))
        replay(fr, train, bench.test, checkpoints=[0, len(train)], progress=False)
        runs.append((list(store.events()), [dataclasses.astuple(r) for r in llm.calls]))
    assert runs[0] == runs[1]


def test_agent_templates_reach_only_the_agents():
    from coevo_jax.orchestrators.flyroute.exploit import ROUTER_TAG
    from coevo_jax.orchestrators.flyroute.gate import JUDGE_TAG

    llm = ScriptedLLM()
    fr = FlyRoute.from_llm(_store(), llm, agent_templates={"math": "{query}\n\nUse \\boxed{}."})
    res = fr.step(Query("q", "question about integral now"))
    assert res.dispatched[0] == "math"
    prompts = {r.agent: r.prompt for r in llm.by_tag(AGENT_TAG)}
    assert prompts["math"] == "question about integral now\n\nUse \\boxed{}."
    assert all(p == "question about integral now" for a, p in prompts.items() if a != "math")
    assert "boxed" not in llm.by_tag(ROUTER_TAG)[0].prompt
    assert all(
        "Query:\nquestion about integral now\n\nResponse" in r.prompt for r in llm.by_tag(JUDGE_TAG)
    )
    assert fr.store["math"].successes[-1].query == "question about integral now"
    with pytest.raises(ValueError, match="placeholder"):
        FlyRoute.from_llm(_store(), llm, agent_templates={"math": "no placeholder"})


class SharedBackboneLLM(ScriptedLLM):
    """One model for every agent: an answer is a function of (prompt, seed) only, as with a
    sampled shared backbone; the agent's name is not seen."""

    def _one(self, r):
        if r.tag == AGENT_TAG:
            import zlib

            return f"answer {zlib.crc32(f'{r.prompt}|{r.seed}'.encode()) % 1000}"
        return super()._one(r)


def test_two_experts_asked_the_same_query_can_answer_differently():
    from coevo_jax.orchestrators.flyroute.bench_data import AGENT_TEMPLATES

    s = _store()
    llm = SharedBackboneLLM(router="math", judge=lambda q, r: "Score: 0.1")
    cfg = FlyRouteConfig(n_explore=3, gamma=0.0, distill_every=1000)
    fr = FlyRoute.from_llm(s, llm, cfg, agent_templates=AGENT_TEMPLATES)
    # a query matching both experts' stores, so exploration dispatches reasoning too
    res = fr.step(Query("q", "integral riddle"))
    assert {"math", "reasoning"} <= set(res.dispatched)
    reqs = {r.agent: r for r in llm.by_tag(AGENT_TAG)}
    assert reqs["math"].prompt != reqs["reasoning"].prompt
    assert reqs["math"].seed != reqs["reasoning"].seed
    assert res.responses["math"] != res.responses["reasoning"]
    # even without templates, the sampling seeds differ per agent
    llm2 = SharedBackboneLLM(router="math", judge=lambda q, r: "Score: 0.1")
    fr2 = FlyRoute.from_llm(_store(), llm2, cfg)
    res2 = fr2.step(Query("q", "integral riddle"))
    seeds = {r.agent: r.seed for r in llm2.by_tag(AGENT_TAG)}
    assert len(set(seeds.values())) == len(seeds) >= 2
    assert res2.responses["math"] != res2.responses["reasoning"]


def test_scripted_run_hand_computed_u_r_vplus_and_selections():
    """Six steps with known outcomes; U, R, V+ and the selections computed by hand.

    Stores: math "integral m0..m4", chem "molecule c0..c4", code "python k0..k4". The router
    always picks code; the judge passes only the topic expert (math for both queries below).
    alpha = beta = 0.5, gamma = 0.06, n_explore = 2.
    """
    s = ProfileStore()
    s.register("math", [f"integral m{i}" for i in range(5)], "Math.")
    s.register("chem", [f"molecule c{i}" for i in range(5)], "Chemistry.")
    s.register("code", [f"python k{i}" for i in range(5)], "Code.")
    llm = ScriptedLLM(router="code")
    fr = FlyRoute.from_llm(s, llm, FlyRouteConfig(distill_every=1000))

    # step 0, "integral molecule": no gated success anywhere, U = 1. math and chem stores are
    # mirror images (same lengths, same document frequencies), so R = 1 for both, 0 for code.
    # V+ = 1 * 1 * (1 - 0.5 * 1) = 0.5 >= gamma for both: explore [math, chem] (tie ->
    # registration order). The judge passes math only.
    r = fr.step(Query("q0", "integral molecule"))
    e = r.exploration
    assert e.u == {"math": 1.0, "chem": 1.0, "code": 1.0}
    assert e.r == pytest.approx({"math": 1.0, "chem": 1.0, "code": 0.0})
    assert e.vplus == pytest.approx({"math": 0.5, "chem": 0.5, "code": 0.0})
    assert (e.selected, e.fallback) == (["math", "chem"], False)
    assert r.dispatched == ["code", "math", "chem"] and r.stored == ["math"]

    # steps 1-5, "integral": only math matches (R = 1, others 0); math has n = 1..5 gated
    # successes: V+ = 0.5 e^{-n/2} = 0.3033, 0.1839, 0.1116, 0.0677 (>= gamma), then 0.0410
    # (< gamma: the fallback takes math anyway, the only agent with V+ > 0).
    want_vplus = [0.30327, 0.18394, 0.11157, 0.06767, 0.04104]
    for n, vp in enumerate(want_vplus, start=1):
        r = fr.step(Query(f"q{n}", "integral"))
        e = r.exploration
        assert e.u["math"] == pytest.approx(math.exp(-0.5 * n))
        assert e.u["chem"] == e.u["code"] == 1.0
        assert e.r == pytest.approx({"math": 1.0, "chem": 0.0, "code": 0.0})
        assert e.vplus["math"] == pytest.approx(vp, abs=1e-5)
        assert e.vplus["chem"] == e.vplus["code"] == 0.0
        assert e.selected == ["math"] and e.fallback == (vp < 0.06)
        assert r.stored == ["math"]
    assert s["math"].n_gated == 6 and s["chem"].n_gated == 0 and s["code"].n_gated == 0
