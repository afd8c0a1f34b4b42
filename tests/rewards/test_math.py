"""Math verifier: normalisations, near misses, box extraction, malformed input, SymPy bombs,
and agreement with HF math-verify (the reference behaviour, docs/design.md §10)."""

import time

import pytest

from coevo_jax.rewards import math as math_reward

from .math_cases import BOMBS, CASES, RAW


def _completion(pred: str) -> str:
    if pred.startswith(RAW):
        return pred[len(RAW) :]
    return f"Working... so the answer is $\\boxed{{{pred}}}$."


def test_enough_cases():
    assert len(CASES) >= 150
    assert sum(1 for *_, want in CASES if want == 0) >= 40  # near misses and malformed


@pytest.mark.parametrize("pred,gold,want", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_case(pred, gold, want):
    got = math_reward.score(_completion(pred), gold, timeout_s=5.0)
    assert got == want, (pred, gold)


@pytest.mark.parametrize(
    "text,want",
    [
        (r"\boxed{1} \boxed{2}", "2"),
        (r"\boxed{a{b}c}", "a{b}c"),
        (r"\boxed{\{1\}}", r"\{1\}"),
        (r"\boxed{1} \boxed{2", "1"),
        (r"\boxed{\frac{1}{2}} and \fbox{3}", "3"),
        ("no box", None),
        (r"\boxed{x", None),
        (r"\boxed {4}", "4"),
    ],
)
def test_last_boxed(text, want):
    assert math_reward.last_boxed(text) == want


@pytest.mark.parametrize("bomb", BOMBS)
def test_bombs_return_within_timeout(bomb):
    t = time.monotonic()
    got = math_reward.score(f"\\boxed{{{bomb}}}", "3", timeout_s=1.5)
    elapsed = time.monotonic() - t
    assert got == 0.0
    assert elapsed < 1.5 + 2.0, elapsed


def test_in_process_mode_matches_isolated():
    for pred, gold, want in CASES[:40]:
        got = math_reward.score(_completion(pred), gold, isolate=False)
        assert got == want, (pred, gold)


# Every case where math-verify (0.9) and we differ, with why we keep our answer. The test
# fails if a disagreement appears that is not listed here.
DISAGREEMENTS = {
    ("5.", "5"): "a trailing sentence period after the answer is punctuation, not a decimal",
    ("15 dollars", "15"): "a unit word after a number is dropped (units normalisation)",
    ("90°", "90"): "the Unicode degree sign is a unit mark like ^\\circ",
    (r"\text{5 hours}", "5"): "\\text{} wrapping the whole answer, then its unit word dropped",
    (r"1\,000", "1000"): "thin-space thousands separator",
    ("1 000", "1000"): "space thousands separator (digits grouped by three)",
    ("B.", "B"): "choice notation: a letter with a period is that choice",
    ("(C) 12", "C"): "choice notation: '(C) 12' names choice C and its value",
    ("option D", "D"): "choice notation: 'option D'",
    (RAW + r"First \boxed{1}, then \boxed{2}.", "2"): "the spec takes the LAST box",
    (RAW + r"\fbox{7}", "7"): "\\fbox is the same box as \\boxed",
    (RAW + r"\boxed{\frac{a}{b}} so \boxed{x^{2}}", "x^2"): "the spec takes the LAST box",
    (RAW + "the answer is 7", "7"): "no \\boxed{} scores 0 (spec); math-verify falls back",
    (RAW + r"\boxedx 5", "5"): "\\boxedx is not \\boxed; no box scores 0",
    (r"\left( 3", "3"): "unbalanced delimiter: malformed, not repaired",
    (r"\frac{1}{2", r"\frac{1}{2}"): "truncated \\frac: malformed, not repaired",
    ("x +* 2", "2"): "malformed operator sequence is not an answer",
}


@pytest.mark.slow
def test_agreement_with_math_verify():
    mv = pytest.importorskip("math_verify", reason="math-verify is the test oracle")
    found = {}
    for pred, gold, want in CASES:
        comp = _completion(pred)
        ours = math_reward.score(comp, gold, timeout_s=5.0)
        assert ours == want
        try:
            theirs = float(mv.verify(mv.parse("\\boxed{" + gold + "}"), mv.parse(comp)))
        except Exception:
            theirs = 0.0
        if theirs != ours:
            found[(pred, gold)] = (ours, theirs)
    unexplained = sorted(set(found) - set(DISAGREEMENTS))
    assert not unexplained, f"new disagreements with math-verify: {unexplained}"
    # A listed case may agree on a loaded machine: math-verify's own 5 s timeout then turns
    # its lenient 1 into a 0. Most of the list must still show up, or it is stale.
    assert len(set(DISAGREEMENTS) & set(found)) >= len(DISAGREEMENTS) - 3
    assert len(found) <= 0.15 * len(CASES)
