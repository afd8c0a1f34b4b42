"""``coevo plan``: the programs it compiles, their per-device split, the verdict, the CLI, and
the architecture presets it falls back on.

The tiny plans compile in this process on the 8 fake CPU devices of tests/conftest.py.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import yaml

from coevo_jax._config import from_dict
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import param_shapes
from coevo_jax.models.presets import NoModelConfigError, hub_preset, planning_config
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.plan import format_plan, plan_run
from coevo_jax.train.plan_hlo import hlo_costs

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = (
    "policy_step", "reference", "logprob_recompute", "sampler_prefill", "sampler_decode",
    "router_features", "router_step",
)  # fmt: skip
KEYS = ("flops_per_device", "argument_bytes", "temp_bytes", "output_bytes", "collective_bytes")
LIMIT = 1 / 8 * 1.1

# A Qwen3-shaped decoder wide enough that the rows' work dominates the replicated adapters'
# optimizer update, which no mesh splits (as tests/train/test_mesh_split.py).
TINY_HF = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128,
    "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 256, "tie_word_embeddings": True,
    "max_position_embeddings": 512,
}  # fmt: skip


def _run_dict(model_dir: Path) -> dict:
    """2 agents x 8 groups x 4 samples = 64 rows in 8 micro-batches (one row per device)."""
    return {
        "model": {"path": str(model_dir), "name": "tiny", "dtype": "float32"},
        "lora": {
            "n_agents": 2,
            "rank": 2,
            "alpha": 4,
            "dropout": 0.0,
            "target_modules": ["q", "k", "v", "o", "gate", "up", "down"],
        },  # fmt: skip
        "rl": {
            "micro_batches": 8,
            "beta": 1e-3,
            "compute_dtype": "float32",
            "remat": False,
            "warmup_steps": 0,
            "decay_steps": 10,
        },  # fmt: skip
        "router": {"n_agents": 2, "hidden": 16, "out_dim": 8, "max_prompt_tokens": 64},
        "data": {"max_input_tokens": 16},
        "rollout": {"engine": "inprocess", "group_size": 4, "max_new_tokens": 32},
        "loop": {"queries_per_round": 16, "groups_per_step": 8},
    }


@functools.cache
def _model_dir() -> Path:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="plan-tiny-"))
    (d / "config.json").write_text(json.dumps(TINY_HF))
    return d


@functools.cache
def _plan(devices: int) -> dict:
    return plan_run(from_dict(TrainConfig, _run_dict(_model_dir())), devices, progress=False)


@pytest.mark.parametrize("devices", [1, 8])
def test_every_program_is_planned_with_its_figures(devices):
    plan = _plan(devices)
    assert plan["devices"] == devices
    assert (plan["mesh"] is None) == (devices == 1)
    assert set(plan["programs"]) == set(PROGRAMS)
    for name, p in plan["programs"].items():
        for key in KEYS:
            assert isinstance(p[key], int | float) and p[key] >= 0, (name, key)
        assert p["flops_per_device"] > 0, name
        assert p["unknown_trip_loops"] == 0, name
    assert plan["fits"] is True  # a tiny model in 80 GB
    json.dumps(plan)  # JSON-ready
    assert "estimates of the GPU" in format_plan(plan)


def test_eight_devices_split_every_program():
    one, eight = _plan(1)["programs"], _plan(8)["programs"]
    ratios = {n: eight[n]["flops_per_device"] / one[n]["flops_per_device"] for n in one}
    assert ratios["policy_step"] <= LIMIT, ratios
    assert all(r <= LIMIT for r in ratios.values()), ratios
    # the sharded backbone is gathered, so a mesh program moves data; one device moves none
    assert eight["policy_step"]["collective_bytes"] > 0
    assert one["policy_step"]["collective_bytes"] == 0


def test_resident_state_shrinks_with_the_mesh_but_not_the_policy():
    one, eight = _plan(1)["resident_bytes"], _plan(8)["resident_bytes"]
    assert eight["backbones"] * 8 == pytest.approx(one["backbones"], rel=0.05)
    assert eight["policies"] == one["policies"]  # replicated


def test_a_tiny_device_does_not_fit():
    cfg = from_dict(TrainConfig, _run_dict(_model_dir()))
    plan = plan_run(cfg, 2, device_memory_gb=1e-6, programs=("router_step",), progress=False)
    assert list(plan["programs"]) == ["router_step"]
    assert plan["fits"] is False
    assert plan["peak_bytes"] > plan["budget_bytes"]
    assert "DOES NOT FIT" in format_plan(plan)


def test_hlo_costs_count_loop_bodies_their_trip_count_times():
    def f(w, x):
        return jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), x, w)[0]

    w = jax.ShapeDtypeStruct((10, 32, 32), jnp.float32)
    x = jax.ShapeDtypeStruct((4, 32), jnp.float32)
    costs = hlo_costs(jax.jit(f).lower(w, x).compile().as_text())
    assert costs["flops"] == 10 * 2 * 4 * 32 * 32
    assert costs["unknown_trip_loops"] == 0


def _n_params(cfg: ModelConfig) -> int:
    shapes = jax.tree.leaves(param_shapes(cfg), is_leaf=lambda s: isinstance(s, tuple))
    return sum(math.prod(s) for s in shapes)


@pytest.mark.parametrize(
    "hub_id, billions",
    [("Qwen/Qwen3-4B", 4.0), ("meta-llama/Llama-3.2-3B-Instruct", 3.2),
     ("microsoft/Phi-4-mini-instruct", 3.8)],
)  # fmt: skip
def test_presets_have_the_model_cards_parameter_counts(hub_id, billions, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: the preset answers
    cfg, source = planning_config(hub_id)
    assert source.startswith("preset")
    assert cfg == ModelConfig.from_hf_dict(hub_preset(hub_id))
    assert _n_params(cfg) / 1e9 == pytest.approx(billions, rel=0.03)


def test_a_cached_hub_config_wins_over_the_preset(tmp_path, monkeypatch):
    snap = tmp_path / "models--Qwen--Qwen3-4B" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(TINY_HF))
    (tmp_path / "models--Qwen--Qwen3-4B" / "refs").mkdir()
    (tmp_path / "models--Qwen--Qwen3-4B" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cfg, source = planning_config("Qwen/Qwen3-4B")
    assert cfg.hidden_size == 128 and source.endswith("config.json")


def test_presets_match_a_local_path_by_its_name_and_unknown_models_fail():
    assert planning_config("checkpoints/Llama-3.2-3B-Instruct")[0].num_layers == 28
    with pytest.raises(NoModelConfigError, match="no-such/model"):
        planning_config("no-such/model")


@pytest.mark.slow  # two JAX starts and seven compiles: 30-70 s on 2 shared cores
def test_cli_json_reruns_itself_on_fake_devices(tmp_path):
    run = _run_dict(_model_dir())
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(run))
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    out = subprocess.run(
        [sys.executable, "-m", "coevo_jax", "plan", "--config", str(tmp_path / "tiny.yaml"),
         "--devices", "2", "--json", "rl.micro_batches=2"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["devices"] == 2 and plan["mesh"]["fsdp"] == 2
    assert set(plan["programs"]) == set(PROGRAMS) and plan["fits"] is True
    assert all(k in p for p in plan["programs"].values() for k in KEYS)
    assert "compiling policy_step" in out.stderr
