import numpy as np
import pytest

from coevo_jax.orchestrators.evochamber.config import STRUCTURES, EvoChamberConfig
from coevo_jax.orchestrators.evochamber.leadlearn import (
    choice_prompt,
    evidence_choice,
    parse_note,
    parse_structure,
    query_vector,
    retrieve,
)
from coevo_jax.orchestrators.evochamber.state import BankEntry, vec_to_bytes

CFG = EvoChamberConfig()


def entry(vec, structure, outcome, niche="x"):
    v = np.asarray(vec, np.float32)
    return BankEntry(
        vec_to_bytes(v / np.linalg.norm(v)),
        niche,
        (0.5, 0.5, 0.5),
        "x / math",
        structure,
        outcome,
        "",
        0,
    )


def test_query_vector_concatenates_and_normalizes():
    xi = query_vector(np.array([1.0, 0.0]), (0.5, 0.5, 0.5), CFG)
    expect = np.array([1.0, 0.0, 0.5, 0.5, 0.5]) / np.sqrt(1.75)
    np.testing.assert_allclose(xi, expect, rtol=1e-6)
    xi2 = query_vector(np.array([1.0, 0.0]), (0.5, 0.5, 0.5), EvoChamberConfig(profile_weight=0.0))
    np.testing.assert_allclose(xi2, [1, 0, 0, 0, 0])


def test_retrieve_top_k_by_cosine_ties_older_first():
    bank = [
        entry([1, 0], "voting", 1.0),
        entry([0, 1], "debate", 0.0),
        entry([1, 0.1], "decompose", 1.0),
        entry([1, 0], "debate", 0.0),
    ]
    got = retrieve(bank, np.array([1.0, 0.0], np.float32), 3)
    assert [e.structure for e in got] == ["voting", "debate", "decompose"]
    assert retrieve([], np.array([1.0, 0.0], np.float32), 3) == []
    assert retrieve(bank, np.ones(5, np.float32) / np.sqrt(5), 3) == []  # other dimension skipped


@pytest.mark.parametrize(
    "text,expected",
    [
        ("STRUCTURE: debate", "debate"),
        ("structure = Generator-Critic", "generator-critic"),
        ("I think voting is weak here. STRUCTURE: decompose", "decompose"),
        ("Let's use a generator critic setup.", "generator-critic"),
        ("Maybe debate... actually majority vote.", "voting"),
        ("STRUCTURE: brainstorming", None),
        ("", None),
        ("Structure: gen-critic, not debate", "generator-critic"),
    ],
)
def test_parse_structure(text, expected):
    assert parse_structure(text, STRUCTURES) == expected


def test_parse_structure_respects_allowed():
    assert parse_structure("STRUCTURE: debate", ("voting",)) is None


def test_evidence_choice_best_mean_outcome_untried_count_as_q_init():
    es = [entry([1, 0], "voting", 0.0), entry([1, 0], "debate", 1.0), entry([1, 0], "debate", 0.5)]
    assert evidence_choice(es, CFG) == "debate"  # 0.75 beats untried (0.5) and voting (0)
    es = [entry([1, 0], "voting", 0.0), entry([1, 0], "debate", 0.25)]
    assert evidence_choice(es, CFG) == "generator-critic"  # untried, first in config order
    assert evidence_choice([], CFG) == CFG.fallback_structure
    cfg = EvoChamberConfig(fallback_structure="decompose")
    assert evidence_choice([], cfg) == "decompose"


def test_choice_prompt_lists_structures_and_entries():
    p = choice_prompt(
        "x", (0.7, 0.5, 0.5), [entry([1, 0], "debate", 1.0)], STRUCTURES, "Solve 1+1."
    )
    assert all(s in p for s in STRUCTURES) and "debate -> reward 1.00" in p and "Solve 1+1." in p


def test_parse_note():
    assert parse_note("NOTE: debate fixed the arithmetic.") == "debate fixed the arithmetic."
    assert parse_note("\n  it worked\nmore") == "it worked"
    assert parse_note("") is None
