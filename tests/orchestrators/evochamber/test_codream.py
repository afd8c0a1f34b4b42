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


@pytest.mark.parametrize(
    "q,niche,giver,expected",
    [
        ([0.9, 0.2, 0.5, 0.4, 0.7], "x", None, ["a1", "a3"]),  # strictly below the median 0.5
        ([0.9, 0.2, 0.5, 0.4, 0.7], "unseen", None, []),  # all at q_init: none below the median
        ([0.9, 0.2, 0.1, 0.8], "x", None, ["a1", "a2"]),  # median 0.5
        ([0.9, 0.2, 0.1, 0.8], "x", "a2", ["a1"]),  # the giver is no recipient
    ],
)
def test_recipients_are_below_the_median_and_not_the_giver(q, niche, giver, expected):
    agents = {f"a{i}": Agent(f"a{i}", "p", q={"x": v}) for i, v in enumerate(q)}
    s = ChamberState(step=0, agents=agents)
    assert recipients(s, niche, CFG, giver=giver) == expected


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


TEAM = ["a", "b", "c"]


def _codream(answers, rewards, niches=("x",), *, threshold=0.5, llm=None):
    """One CoDream of team a, b, c on problem "P" in niche "x"; returns (llm, insights, counters)."""
    llm = llm or PhaseLLM()
    caller = Caller(llm, {m: MemberContext("p") for m in TEAM}, CFG)
    insights, counters = run_codream(
        caller,
        TEAM,
        {"problem": "P"},
        "x",
        answers,
        rewards,
        list(niches),
        success_threshold=threshold,
    )
    return llm, insights, counters


def test_run_codream_five_phases_majority_survivors_and_givers():
    llm, insights, counters = _codream({"a": "A", "b": "B", "c": None}, [0.0, 1.0, 0.0], ("x", "y"))
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
    answers = {m: m for m in TEAM}
    llm, insights, counters = _codream(answers, [0.0, 0.0, 0.0])
    assert (insights, counters, llm.tags) == ([], {"codream_skipped_no_success": 1}, [])
    # success_threshold is what counts: 0.4 is a failure at 0.5, a success at 0.3
    _, insights, _ = _codream(answers, [0.4, 0.0, 0.0], threshold=0.5, llm=llm)
    assert (insights, llm.tags) == ([], [])
    _, insights, _ = _codream(answers, [0.4, 0.0, 0.0], threshold=0.3, llm=llm)
    contrast = [r for r in llm.reqs if r.tag == "codream_contrast"]
    assert [r.agent for r in contrast] == ["b", "c"]
    assert all("A teammate's attempt succeeded" in r.prompt for r in contrast)
    assert {i["giver"] for i in insights} == {"a"}


def test_only_failing_members_contrast_and_only_successful_ones_give():
    llm, insights, _ = _codream({m: m.upper() for m in TEAM}, [1.0, 1.0, 0.0])
    assert [a for t, a in llm.tags if t == "codream_contrast"] == ["c"]
    # c contrasts against a (tie with b -> team order)
    (c_req,) = [r for r in llm.reqs if r.tag == "codream_contrast"]
    assert "succeeded (end):\nA\n" in c_req.prompt
    assert {i["giver"] for i in insights} <= {"a", "b"}
