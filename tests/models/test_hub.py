"""coevo_jax.models.hub: Hub ids resolve through a local HF cache, offline; nothing touches the
network (every socket connect fails in these tests)."""

from __future__ import annotations

import json
import socket

import jax
import numpy as np
import pytest

from coevo_jax._errors import UserError
from coevo_jax.models import hub, load
from coevo_jax.models.hf_export import save_hf
from coevo_jax.train.config import ModelSpec
from tests.helpers import family_configs
from tests.models._params import numpy_params

REPO = "acme/tiny-qwen3"
REVISION = "0123456789abcdef0123456789abcdef01234567"
CFG = family_configs()["qwen3"]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a hub test tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _tokenizer_files(d) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>")
    )
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "b", "pad_token": "a"}))


def _cache_model(cache, repo: str = REPO, max_shard_size: int | str = "2GB"):
    """Writes ``repo`` into the HF cache layout under ``cache``
    (``models--org--name/{refs/main, snapshots/<rev>/...}``); returns (snapshot dir, params)."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    params = numpy_params(CFG, seed=5)
    snap = save_hf(
        params,
        CFG,
        repo_dir / "snapshots" / REVISION,
        max_shard_size=max_shard_size,
        progress=False,
    )
    _tokenizer_files(snap)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(REVISION)
    return snap, params


@pytest.fixture()
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.mark.parametrize("max_shard_size", ["2GB", 8_000])
def test_a_hub_id_loads_from_the_cache_offline(offline_cache, max_shard_size):
    snap, params = _cache_model(offline_cache, max_shard_size=max_shard_size)
    assert hub.resolve_model(REPO) == snap
    model, tok = load(REPO, progress=False)
    assert model.config.num_layers == CFG.num_layers and tok is not None
    assert tok.encode("a b") == [0, 1]
    for a, b in zip(jax.tree.leaves(model.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_hf_home_names_the_cache_when_hf_hub_cache_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "home" / "hub").mkdir(parents=True)
    snap, _ = _cache_model(tmp_path / "home" / "hub")
    assert hub.hub_cache_dir() == tmp_path / "home" / "hub"
    assert hub.resolve_model(REPO) == snap


def test_an_uncached_id_offline_is_one_clear_error_naming_it(offline_cache):
    with pytest.raises(hub.HubModelError, match=r"'acme/not-cached'.*HF_HUB_OFFLINE") as e:
        load("acme/not-cached", progress=False)
    assert isinstance(e.value, UserError) and isinstance(e.value, FileNotFoundError)
    assert str(offline_cache) in str(e.value)


def test_a_local_path_wins_over_a_hub_id(offline_cache, tmp_path, monkeypatch):
    _cache_model(offline_cache)
    monkeypatch.chdir(tmp_path)
    local = tmp_path / "acme" / "tiny-qwen3"
    local.mkdir(parents=True)
    assert hub.resolve_model(REPO) == local.relative_to(tmp_path)


@pytest.mark.parametrize("ref", ["./acme/none", "/abs/none", "~/none", "a/b/c", "x.gguf", "none"])
def test_references_that_are_not_hub_ids_are_missing_paths(offline_cache, ref):
    assert not hub.looks_like_hub_id(ref)
    with pytest.raises(FileNotFoundError, match="model path not found") as e:
        hub.resolve_model(ref)
    assert not isinstance(e.value, hub.HubModelError)


def test_online_the_download_is_limited_to_config_tokenizer_and_safetensors(
    offline_cache, monkeypatch
):
    snap, _ = _cache_model(offline_cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(snap)

    monkeypatch.setattr(hub, "snapshot_download", fake_snapshot_download)
    assert hub.resolve_model("acme/other") == snap
    ((repo_id, kwargs),) = calls
    assert repo_id == "acme/other" and kwargs["local_files_only"] is False
    assert kwargs["cache_dir"] == offline_cache
    patterns = set(kwargs["allow_patterns"])
    assert {"config.json", "tokenizer.json", "*.safetensors", "model.safetensors.index.json"} <= (
        patterns
    )
    assert not any(p == "*" or p.endswith((".bin", ".pt", ".pth", ".gguf")) for p in patterns)


def test_model_spec_takes_a_hub_id():
    assert ModelSpec(path="Qwen/Qwen3-4B").path == "Qwen/Qwen3-4B"
    assert hub.looks_like_hub_id("Qwen/Qwen3-4B")
