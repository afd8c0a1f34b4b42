"""make_engine's vLLM path: the server it asks for (no server is started here)."""

import dataclasses

import jax

from coevo_jax.models import init_params
from coevo_jax.train import setup
from coevo_jax.train.loop import Backbone
from tests.helpers import tiny_model_config
from tests.train._tiny import VOCAB, CharTokenizer, tiny_config


class _Server:
    url = "http://127.0.0.1:1"
    restarts = 0


def _asked(monkeypatch, tmp_path, family):
    cfg = tiny_config()
    cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, engine="vllm"))
    mcfg = tiny_model_config(family, vocab_size=VOCAB, num_layers=2, max_position_embeddings=512)
    bb = Backbone(init_params(mcfg, jax.random.PRNGKey(0)), mcfg, CharTokenizer())
    calls = []
    monkeypatch.setattr(setup, "launch_vllm", lambda *a, **kw: calls.append(kw) or _Server())
    (group,) = setup.make_groups(cfg, [bb])
    servers = {}
    setup.make_engine(cfg, group, 0, tmp_path, servers=servers)
    setup.make_engine(cfg, group, 0, tmp_path, servers=servers)  # same base model: reused
    assert len(calls) == 1
    return calls[0], cfg.lora.rank


def test_phi3_server_holds_the_fused_qkv_rank(monkeypatch, tmp_path):
    kw, r = _asked(monkeypatch, tmp_path, "phi3")
    assert kw["max_lora_rank"] == 3 * r
    assert kw["agents"] == 2


def test_llama_server_holds_the_agent_rank(monkeypatch, tmp_path):
    kw, r = _asked(monkeypatch, tmp_path, "llama")
    assert kw["max_lora_rank"] == r
