"""The domain registry (coevo_jax.data.domains) and its verifier binding (rewards.verifiers).

A toy domain is added in a fixture the way a new domain is added to the project: one verifier
module (toy_domain/toy_verifier.py) plus one registry entry. It then validates as a record,
renders a prompt, is scored through the batch pool and aggregated, and is removed again.
"""

from pathlib import Path

import pytest

from coevo_jax import rewards
from coevo_jax.aggregate import aggregate
from coevo_jax.data import Record, RecordError, domains, render_prompt
from coevo_jax.data.templates import format_line
from coevo_jax.rewards import RewardConfig, verifiers

TOY_DIR = Path(__file__).parent / "toy_domain"
TOY_FORMAT = "Write the answer in capital letters on the last line."


@pytest.fixture
def toy(monkeypatch):
    # The verifier module must be importable by reward workers too; they start with this
    # process's sys.path.
    monkeypatch.syspath_prepend(str(TOY_DIR))
    entry = domains.Domain("toy", "toy_verifier:verify", TOY_FORMAT, ("true_answer",))
    with domains.registered(entry) as d:
        yield d
    assert "toy" not in domains.names()


def _toy_record(**kw) -> Record:
    fields = dict(id="toy/1", source="unit", split="test", cls="toy", problem="Say cat.")
    return Record(**{**fields, "true_answer": "cat", **kw})


def test_a_toy_domain_is_one_module_and_one_entry(toy):
    assert domains.names()[-1] == "toy" and domains.get("toy") is toy
    rec = _toy_record()
    assert Record.from_dict(rec.to_dict()) == rec
    with pytest.raises(RecordError, match="required for class 'toy'") as ei:
        _toy_record(true_answer=None)
    assert ei.value.field == "true_answer"

    assert format_line(rec) == TOY_FORMAT
    assert render_prompt(rec) == f"Say cat.\n\n{TOY_FORMAT}"

    math = Record(
        id="m/1", source="unit", split="test", cls="math", problem="1/2?", true_answer="1/2"
    )
    got = rewards.score_batch([rec, rec, math], ["meow\nCAT", "cat", "\\boxed{0.5}"], workers=2)
    assert got == [1.0, 0.0, 1.0]
    assert rewards.score(rec, "CAT") == 1.0
    assert RewardConfig().timeout_for("toy") == RewardConfig().default_timeout_s

    # not votable: the most familiar agent's answer is taken, no vote
    out = aggregate("toy", ["CAT", "CAT", "DOG"], [0.2, 0.3, 0.9], extract=lambda c: c)
    assert out.index == 2 and out.answer is None


def test_the_toy_domain_is_gone_after_the_fixture():
    assert "toy" not in domains.names()
    with pytest.raises(RecordError, match="'toy' is not a registered class"):
        _toy_record()


def test_every_registered_class_has_a_verifier_and_a_format_line():
    bound = verifiers.check_registry()
    assert list(bound) == ["math", "code", "if", "reasoning"] == list(domains.names())
    samples = {
        "math": {"class": "math"},
        "code": {"class": "code", "fn_name": "add"},
        "if": {"class": "if"},
        "reasoning": {"class": "reasoning"},
    }
    for d in domains.all_domains():
        assert callable(bound[d.name])
        line = d.format_line(samples[d.name])
        # None is a stated choice: an IFEval prompt's constraints are its format.
        assert (line is None) == (d.name == "if")
        assert line is None or line.strip()
    assert [d.name for d in domains.all_domains() if d.votable] == ["math", "reasoning"]


def test_builtin_batch_deadlines_are_unchanged():
    c = RewardConfig()
    got = [c.timeout_for(n) for n in ("math", "code", "if", "reasoning")]
    assert got == [c.math_timeout_s, c.code_timeout_s, c.if_timeout_s, c.reasoning_timeout_s]


def test_an_unknown_class_fails_loudly_everywhere():
    rec = {"id": "q7", "class": "poetry", "problem": "Write a poem."}
    with pytest.raises(
        domains.UnknownClassError, match="record 'q7': unknown record class 'poetry'"
    ):
        domains.get("poetry", record_id="q7")
    for call in (
        lambda: rewards.score(rec, "x"),
        lambda: rewards.score_batch([rec], ["x"], workers=1),
        lambda: format_line(rec),
    ):
        with pytest.raises(ValueError, match="record 'q7': unknown record class 'poetry'"):
            call()
    with pytest.raises(ValueError, match="unknown record class 'poetry'"):
        aggregate("poetry", ["a"], [1.0], extract=lambda c: c)
    with pytest.raises(RecordError, match="'poetry' is not a registered class") as ei:
        Record(id="q7", source="unit", split="test", cls="poetry", problem="p")
    assert ei.value.field == "class" and ei.value.record_id == "q7"


def test_registry_entries_are_checked():
    with pytest.raises(ValueError, match="already registered"):
        domains.register(domains.Domain("math", "m:verify", None))
    with pytest.raises(ValueError, match="not record fields"):
        domains.Domain("toy", "m:verify", None, ("answer",))
    with pytest.raises(ValueError, match="'module:function'"):
        domains.Domain("toy", "m.verify", None)
    with pytest.raises(ValueError, match="domain name"):
        domains.Domain("Toy Class", "m:verify", None)


def test_a_missing_verifier_is_named():
    with domains.registered(domains.Domain("ghost", "no_such_module_xyz:verify", None)):
        with pytest.raises(verifiers.VerifierError, match="class 'ghost'.*no_such_module_xyz"):
            rewards.score({"id": "g", "class": "ghost"}, "x")
        with pytest.raises(verifiers.VerifierError, match="class 'ghost'"):
            verifiers.check_registry()
