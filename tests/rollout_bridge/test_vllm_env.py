"""Finding the vLLM interpreter and the model directory a vLLM server loads (no server)."""

import json
import sys

import pytest

from rollout_bridge import vllm_env
from rollout_bridge.served_model import file_digest, served_model_dir


def test_default_venv_is_keyed_by_the_pin(monkeypatch, tmp_path):
    monkeypatch.delenv(vllm_env.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    venv = vllm_env.default_venv()
    assert venv == tmp_path / "coevo-jax" / f"vllm-{vllm_env.requirements_hash()}"
    monkeypatch.setenv(vllm_env.ENV_VAR, str(tmp_path / "mine"))
    assert vllm_env.default_venv() == tmp_path / "mine"


def test_missing_venv_says_how_to_make_one(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_env.ENV_VAR, str(tmp_path / "none"))
    with pytest.raises(vllm_env.VLLMEnvError, match="python -m rollout_bridge.vllm_env"):
        vllm_env.find_vllm_python()


def test_a_half_made_venv_is_not_ready(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert not vllm_env.is_ready(tmp_path)
    (tmp_path / vllm_env.MARKER).write_text('{"requirements": "an-old-pin"}')
    assert not vllm_env.is_ready(tmp_path)
    (tmp_path / vllm_env.MARKER).write_text(
        json.dumps({"requirements": vllm_env.requirements_hash()})
    )
    assert vllm_env.is_ready(tmp_path)


def test_override_interpreter_is_checked(tmp_path):
    with pytest.raises(vllm_env.VLLMEnvError, match="no such file"):
        vllm_env.find_vllm_python(tmp_path / "python")
    # the test environment has the vllm oracle wheel, so this interpreter can import vllm
    pytest.importorskip("vllm", reason="vllm oracle wheel not installed")
    assert vllm_env.find_vllm_python(sys.executable) == sys.executable


def test_served_model_passes_directories_and_hub_names_through(tmp_path):
    assert served_model_dir(str(tmp_path)) == str(tmp_path)
    assert served_model_dir("HuggingFaceTB/SmolLM2-135M-Instruct") == (
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    with pytest.raises(FileNotFoundError, match="no such GGUF"):
        served_model_dir(str(tmp_path / "m.gguf"))


def test_file_digest_is_content_addressed(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"x" * 10)
    b.write_bytes(b"x" * 10)
    assert file_digest(a) == file_digest(b)
    b.write_bytes(b"y" * 10)
    assert file_digest(a) != file_digest(b)
