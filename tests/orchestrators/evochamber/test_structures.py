import dataclasses

import pytest

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.prompts import answer_key, last_boxed, plurality
from coevo_jax.orchestrators.evochamber.structures import (
    Caller,
    MemberContext,
    parse_parts,
    run_structure,
)

CFG = EvoChamberConfig(debate_rounds=2)
REC = {"id": "t", "class": "math", "problem": "What is 6*7?", "true_answer": "42", "niche": "x"}
TEAM = ["a", "c", "s"]


class TableLLM:
    """Replies from ``table[(tag, agent)]`` (or ``table[tag]``); records every request."""

    def __init__(self, table):
        self.table = table
        self.reqs = []

    def complete(self, reqs):
        self.reqs.extend(reqs)
        return [self.table.get((r.tag, r.agent), self.table.get(r.tag, "")) for r in reqs]


def run(name, table, cfg=CFG, contexts=None):
    llm = TableLLM(table)
    caller = Caller(
        llm, contexts or {m: MemberContext(f"persona {m}") for m in TEAM}, cfg, seed_base=100
    )
    return run_structure(name, caller, TEAM, REC), llm, caller


def test_answer_key_and_plurality():
    assert last_boxed(r"a \boxed{1} b \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed("no box") is None and last_boxed(r"\boxed{unbalanced") is None
    assert answer_key(REC, r"so \boxed{ 42 }") == "42"
    assert answer_key(REC, "the answer is 41 or 42") == "42"
    code = {"class": "code"}
    assert answer_key(code, "```python\ndef f():\n    return 1\n```") == "def f(): return 1"
    assert plurality(["1", "2", "2"]) == 1 and plurality(["1", "2", "3"]) == 0
    assert plurality([None, "2", None]) == 1 and plurality([None, None]) is None


def test_voting_majority_and_anchor_tiebreak():
    res, llm, caller = run(
        "voting",
        {
            ("solve", "a"): r"\boxed{41}",
            ("solve", "c"): r"\boxed{42}",
            ("solve", "s"): r"\boxed{42}",
        },
    )
    assert last_boxed(res.final) == "42" and caller.calls == 3
    assert [r.seed for r in llm.reqs] == [100, 101, 102]
    assert llm.reqs[0].prompt.startswith("persona a") and llm.reqs[0].agent == "a"
    res, _, _ = run(
        "voting",
        {("solve", "a"): r"\boxed{1}", ("solve", "c"): r"\boxed{2}", ("solve", "s"): r"\boxed{3}"},
    )
    assert last_boxed(res.final) == "1"  # all differ: the anchor's answer


def test_debate_has_rounds_and_sees_teammates():
    table = {("solve", m): rf"\boxed{{{m}0}}" for m in TEAM}
    table.update({("debate_round1", m): rf"\boxed{{{m}1}}" for m in TEAM})
    table.update(
        {
            ("debate_round2", "a"): r"\boxed{9}",
            ("debate_round2", "c"): r"\boxed{9}",
            ("debate_round2", "s"): r"\boxed{8}",
        }
    )
    res, llm, caller = run("debate", table)
    assert [r.tag for r in llm.reqs] == ["solve"] * 3 + ["debate_round1"] * 3 + [
        "debate_round2"
    ] * 3
    r1_anchor = llm.reqs[3].prompt
    assert "c0" in r1_anchor and "s0" in r1_anchor and "a0" in r1_anchor
    assert last_boxed(res.final) == "9" and res.attempts["s"] == r"\boxed{8}"


def test_generator_critic_critiques_then_revises():
    res, llm, _ = run(
        "generator-critic",
        {
            "generate": r"draft \boxed{41}",
            "critique": r"wrong, \boxed{42}",
            "revise": r"fixed \boxed{42}",
        },
    )
    assert [(r.tag, r.agent) for r in llm.reqs] == [
        ("generate", "a"),
        ("critique", "c"),
        ("critique", "s"),
        ("revise", "a"),
    ]
    assert "draft" in llm.reqs[1].prompt and "wrong" in llm.reqs[3].prompt
    assert res.final == r"fixed \boxed{42}" and res.attempts == {
        "a": r"fixed \boxed{42}",
        "c": r"wrong, \boxed{42}",
        "s": r"wrong, \boxed{42}",
    }


def test_decompose_split_solve_combine():
    res, llm, _ = run(
        "decompose",
        {
            "split": "1. find six\n2. find seven\n3. multiply\n4. extra",
            "subsolve": "ok",
            "combine": r"\boxed{42}",
        },
    )
    assert [(r.tag, r.agent) for r in llm.reqs] == [
        ("split", "a"),
        ("subsolve", "c"),
        ("subsolve", "s"),
        ("subsolve", "a"),
        ("combine", "a"),
    ]
    assert "multiply" in llm.reqs[3].prompt and "extra" not in "".join(
        r.prompt for r in llm.reqs[1:4]
    )
    assert res.final == r"\boxed{42}" and res.attempts == {"a": r"\boxed{42}", "c": None, "s": None}
    assert res.counters == {}


def test_decompose_unparsable_split_falls_back_to_whole_problem():
    res, llm, _ = run(
        "decompose", {"split": "I refuse.", "subsolve": "ok", "combine": r"\boxed{42}"}
    )
    assert res.counters == {"decompose_split_fallback": 1}
    assert [r.tag for r in llm.reqs] == ["split", "subsolve", "combine"]


def test_parse_parts():
    assert parse_parts("Plan:\n1) a\n- b\nStep 3: c\n", 5) == ["a", "b", "c"]


def test_unknown_structure_and_bad_llm():
    with pytest.raises(ValueError, match="unknown structure"):
        run("chat", {})

    class Short:
        def complete(self, reqs):
            return []

    caller = Caller(Short(), {m: MemberContext("p") for m in TEAM}, CFG)
    with pytest.raises(RuntimeError, match="0 completions for 3"):
        run_structure("voting", caller, TEAM, REC)


def test_context_is_prepended():
    ctx = {m: MemberContext("P", ("lesson one",), ("meta one",)) for m in TEAM}
    _, llm, _ = run("voting", {"solve": "x"}, contexts=ctx)
    p = llm.reqs[0].prompt
    assert p.index("P") < p.index("lesson one") < p.index("meta one") < p.index("What is 6*7?")
    cfg = dataclasses.replace(CFG, max_tokens=77)
    _, llm, _ = run("voting", {"solve": "x"}, cfg=cfg)
    assert llm.reqs[0].max_tokens == 77
