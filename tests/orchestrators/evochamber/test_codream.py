import dataclasses

import pytest

from coevo_jax.orchestrators.evochamber.codream import (
    parse_insight,
    parse_keep,
    parse_level,
    recipients,
    run_codream,
    should_fire,
)
from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.state import Agent, ChamberState
from coevo_jax.orchestrators.evochamber.structures import Caller, MemberContext

CFG = EvoChamberConfig()


def test_should_fire():
    assert should_fire([0.0, 1.0, 0.0], ["1", "1", "1"], CFG) == "low_reward"
    assert should_fire([1.0, 1.0, 0.0], ["1", "1", "2"], CFG) == "disagreement"
    assert should_fire([1.0, 1.0, 1.0], ["1", "1", None], CFG) is None
    assert (
        should_fire(
            [1.0, 1.0, 0.0],
            ["1", "1", "2"],
            dataclasses.replace(CFG, codream_on_disagreement=False),
        )
        is None
    )
    assert should_fire([0.0] * 3, [None] * 3, dataclasses.replace(CFG, codream=False)) is None


def test_recipients_strictly_below_median():
    agents = {
        f"a{i}": Agent(f"a{i}", "p", q={"x": v}) for i, v in enumerate([0.9, 0.2, 0.5, 0.4, 0.7])
    }
    s = ChamberState(step=0, agents=agents)
    assert recipients(s, "x", CFG) == ["a1", "a3"]  # median 0.5
    assert recipients(s, "unseen", CFG) == []  # everyone at q_init: nobody below the median


@pytest.mark.parametrize(
    "text,expected,fallbacks",
    [
        (
            "INSIGHT: check parity\nLEVEL: cross-domain\nNICHE: gsm8k",
            {"text": "check parity", "level": "cross-domain", "niche": "gsm8k"},
            [],
        ),
        (
            '{"insight": "use symmetry", "level": "task-local", "niche": "MATH"}',
            {"text": "use symmetry", "level": "task-local", "niche": "math"},
            [],
        ),
        (
            "INSIGHT: x\nLEVEL: galaxy-wide\nNICHE: nowhere",
            {"text": "x", "level": "subdomain", "niche": "mbpp"},
            ["codream_level_fallback", "codream_niche_fallback"],
        ),
        (
            "INSIGHT: y\nLEVEL: General",
            {"text": "y", "level": "cross-domain", "niche": "mbpp"},
            ["codream_niche_fallback"],
        ),
        ("no labels at all", None, ["codream_insight_malformed"]),
        (
            "{not json} INSIGHT: z\nLEVEL: subdomain\nNICHE: Math ",
            {"text": "z", "level": "subdomain", "niche": "math"},
            [],
        ),
    ],
)
def test_parse_insight(text, expected, fallbacks):
    got, fb = parse_insight(text, "mbpp", ["gsm8k", "math", "mbpp"])
    assert got == expected and fb == fallbacks


def test_parse_level_and_keep():
    assert (
        parse_level("Task-local") == "task-local"
        and parse_level("sub-domain scoped") == "subdomain"
    )
    assert parse_level("???") is None
    assert parse_keep("KEEP: 1, 3", 3) == {0, 2}
    assert parse_keep("Keep: 7, 2", 3) == {1}
    assert parse_keep("DROP: 2", 3) == {0, 2}
    assert parse_keep("they are all fine", 3) is None


class PhaseLLM:
    """Answers each CoDream phase; debate keeps proposal 1 (two votes) and 3 (one vote)."""

    def __init__(self):
        self.tags = []
        self.reqs = []

    def complete(self, reqs):
        out = []
        self.reqs.extend(reqs)
        for r in reqs:
            self.tags.append((r.tag, r.agent))
            out.append(
                {
                    "codream_reflect": f"DIAGNOSIS: d-{r.agent}",
                    "codream_contrast": f"DELTA: delta-{r.agent}",
                    "codream_imagine": f"STRATEGY: s-{r.agent}\nNICHES: Y, nowhere",
                    "codream_debate": "KEEP: 1, 3"
                    if r.agent == "b"
                    else ("KEEP: 1" if r.agent == "a" else "garbled"),
                    "codream_crystallize": f"INSIGHT: i-{r.agent}\nLEVEL: subdomain"
                    + ("\nNICHE: x" if r.agent == "a" else ""),
                }[r.tag]
            )
        return out


def test_run_codream_five_phases_majority_survivors_and_givers():
    llm = PhaseLLM()
    team = ["a", "b", "c"]
    caller = Caller(llm, {m: MemberContext("p") for m in team}, CFG)
    insights, counters = run_codream(
        caller,
        team,
        {"problem": "P"},
        "x",
        {"a": "A", "b": "B", "c": None},
        [0.0, 1.0, 0.0],
        ["x", "y"],
        success_threshold=0.5,
    )
    tags = [t for t, _ in llm.tags]
    assert (
        tags
        == ["codream_reflect"] * 3
        + ["codream_contrast"] * 2
        + ["codream_imagine"] * 3
        + ["codream_debate"] * 3
        + ["codream_crystallize"] * 2
    )
    # contrast: the two failing members against the one that succeeded ("b")
    assert [a for t, a in llm.tags if t == "codream_contrast"] == ["a", "c"]
    # votes: proposal 1 gets a, b, c(fallback: keep all) = 3; 2 gets c = 1; 3 gets b, c = 2
    # a's and c's proposals carry b's approach: b is the giver, they are the authors
    assert [(i["giver"], i["author"]) for i in insights] == [("b", "a"), ("b", "c")]
    assert insights[0] == {
        "giver": "b",
        "author": "a",
        "text": "i-a",
        "level": "subdomain",
        "niche": "x",
    }
    # no NICHE line: the proposal's known tag ("Y" -> "y") is the scope
    assert insights[1]["niche"] == "y"
    assert counters == {"codream_debate_fallback": 1, "codream_niche_fallback": 1}
    crystallize = [r for r in llm.reqs if r.tag == "codream_crystallize"]
    assert "Tagged niches: y." in crystallize[0].prompt


def test_codream_is_skipped_when_no_member_succeeded():
    """All members failed: there is no successful approach to contrast with (the old code
    contrasted against the "best" of three zeros)."""
    llm = PhaseLLM()
    team = ["a", "b", "c"]
    caller = Caller(llm, {m: MemberContext("p") for m in team}, CFG)
    insights, counters = run_codream(
        caller,
        team,
        {"problem": "P"},
        "x",
        {m: m for m in team},
        [0.0, 0.0, 0.0],
        ["x"],
        success_threshold=0.5,
    )
    assert (insights, counters, llm.tags) == ([], {"codream_skipped_no_success": 1}, [])
    # success_threshold is what counts: 0.4 is a failure at 0.5, a success at 0.3
    insights, _ = run_codream(
        caller,
        team,
        {"problem": "P"},
        "x",
        {m: m for m in team},
        [0.4, 0.0, 0.0],
        ["x"],
        success_threshold=0.3,
    )
    contrast = [r for r in llm.reqs if r.tag == "codream_contrast"]
    assert [r.agent for r in contrast] == ["b", "c"]
    assert all("A teammate's attempt succeeded" in r.prompt for r in contrast)
    assert {i["giver"] for i in insights} == {"a"}


def test_only_failing_members_contrast_and_only_successful_ones_give():
    llm = PhaseLLM()
    team = ["a", "b", "c"]
    caller = Caller(llm, {m: MemberContext("p") for m in team}, CFG)
    insights, _ = run_codream(
        caller,
        team,
        {"problem": "P"},
        "x",
        {m: m.upper() for m in team},
        [1.0, 1.0, 0.0],
        ["x"],
        success_threshold=0.5,
    )
    assert [a for t, a in llm.tags if t == "codream_contrast"] == ["c"]
    # c contrasts against a (tie with b -> team order)
    (c_req,) = [r for r in llm.reqs if r.tag == "codream_contrast"]
    assert "succeeded (end):\nA\n" in c_req.prompt
    assert {i["giver"] for i in insights} <= {"a", "b"}


def test_recipients_exclude_the_giver():
    agents = {f"a{i}": Agent(f"a{i}", "p", q={"x": v}) for i, v in enumerate([0.9, 0.2, 0.1, 0.8])}
    s = ChamberState(step=0, agents=agents)
    assert recipients(s, "x", CFG) == ["a1", "a2"]  # median 0.5
    assert recipients(s, "x", CFG, giver="a2") == ["a1"]
