"""The orchestrators' shared model loading: --engine http reads the tokenizer, not the weights."""

import pytest


def _default_model():
    from coevo_jax.models.default import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_http_engine_loads_only_the_tokenizer(monkeypatch, tmp_path):
    pytest.importorskip("rollout_bridge.http_engine")
    path = _default_model()
    import coevo_jax.models.gguf as gguf
    import coevo_jax.models.loading as loading
    from coevo_jax.orchestrators import engine_llm

    def no_weights(*a, **k):
        raise AssertionError("weights were loaded for --engine http")

    monkeypatch.setattr(loading, "load", no_weights)
    monkeypatch.setattr(engine_llm, "load", no_weights)
    monkeypatch.setattr(gguf, "load_gguf", no_weights)
    monkeypatch.setattr(gguf, "load_gguf_arrays", no_weights)
    from coevo_jax.orchestrators.evochamber.cli import make_llm

    llm = make_llm("http", "http://127.0.0.1:9", path, 0, "served-name")
    inner = llm.llm  # SharedBackbone around EngineTextLLM
    assert type(inner.engine).__name__ == "HTTPEngine"
    assert inner.engine.base_model == "served-name"
    assert inner.context_length == 8192  # SmolLM2's GGUF context_length
    assert inner.count_tokens("hello") > 1


def test_both_clis_share_one_loader(monkeypatch):
    from coevo_jax.orchestrators import engine_llm
    from coevo_jax.orchestrators.evochamber import cli as evo_cli
    from coevo_jax.orchestrators.flyroute import cli as fly_cli

    seen = []

    def fake(**kw):
        seen.append(kw)
        return "LLM"

    monkeypatch.setattr(engine_llm, "engine_text_llm", fake)
    assert fly_cli.engine_llm(None, ["math", "code"], max_prompt_tokens=99) == "LLM"
    assert evo_cli.make_llm("inprocess", None, "m", 0).llm == "LLM"
    assert seen[0]["agent_ids"] == {"math": -1, "code": -1}
    assert seen[0]["max_prompt_tokens"] == 99 and seen[0]["prog"] == "coevo flyroute"
    assert seen[1]["engine"] == "inprocess" and seen[1]["model"] == "m"


def test_unknown_path_is_a_clear_exit(tmp_path):
    pytest.importorskip("rollout_bridge.text")
    from coevo_jax.orchestrators.engine_llm import engine_text_llm

    with pytest.raises(SystemExit, match="coevo x: cannot load the model/tokenizer.*not found"):
        engine_text_llm(prog="coevo x", engine="http", url="http://h", model=str(tmp_path / "no"))
