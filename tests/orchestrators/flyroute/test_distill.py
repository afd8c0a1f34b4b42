from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.distill import (
    DISTILL_TAG,
    Distiller,
    clean_description,
    distill_due,
    distill_prompt,
)
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore

from .flyroute_fakes import ScriptedLLM


def _store():
    s = ProfileStore()
    s.register("math", [f"seed {i}" for i in range(5)], "Solves math problems.")
    return s


def test_prompt_has_seed_prior_and_recent_successes():
    s = _store()
    for i in range(4):
        s.add_success("math", f"query {i}", f"answer {i}\nline two", 0.9)
    p = distill_prompt(s["math"], recent=2, response_chars=8)
    assert "Solves math problems." in p and "Current learned description" not in p
    assert "query 3" in p and "query 2" in p and "query 1" not in p  # the 2 most recent
    assert "answer 3 [...]" in p  # response cut, newlines flattened
    assert "seed 0" not in p  # registration seeds are not evidence of success
    s.add_learned("math", "Integrals.")
    assert "Current learned description: Integrals." in distill_prompt(s["math"])


def test_clean_description():
    assert clean_description('Description: "Solves integrals."') == "Solves integrals."
    assert clean_description("**Updated description:** Calculus help.\n") == "Calculus help."
    assert clean_description("x" * 50, max_chars=10) == "x" * 10


def test_distillation_every_m_successes_keeps_versions():
    cfg = FlyRouteConfig(distill_every=3)
    s = _store()
    llm = ScriptedLLM()
    d = Distiller(llm, cfg)
    versions_at = []
    for i in range(10):
        s.add_success("math", f"q{i}", "r", 0.9)
        if d.run(s, ["math"], step=i):
            versions_at.append(i + 1)
    assert versions_at == [3, 6, 9]
    p = s["math"]
    assert [v.n_successes for v in p.learned] == [3, 6, 9]
    assert [v.step for v in p.learned] == [2, 5, 8]
    assert p.active_description == "handles queries like the 9 shown."  # last 9 gated
    assert len(llm.by_tag(DISTILL_TAG)) == 3
    assert not distill_due(p, 3) and distill_due(p, 1)


def test_empty_distillation_keeps_prior_and_retries():
    cfg = FlyRouteConfig(distill_every=2)
    s = _store()
    replies = iter(["", "Calculus."])
    d = Distiller(ScriptedLLM(distill=lambda p: next(replies)), cfg)
    s.add_success("math", "a", "r", 0.9)
    s.add_success("math", "b", "r", 0.9)
    assert d.run(s, ["math"]) == {} and d.stats["empty"] == 1
    assert s["math"].active_description == "Solves math problems."
    s.add_success("math", "c", "r", 0.9)
    assert list(d.run(s, ["math"])) == ["math"]
    assert s["math"].learned[-1].n_successes == 3
