from pathlib import Path

import pytest

from coevo_jax._config import ConfigError, from_dict
from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.train.config import CONFIG_DIR, TrainConfig, load_config


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert cfg.lora.n_agents == cfg.router.n_agents


def test_paper_configs_carry_the_hyperparameter_table():
    c = load_config(CONFIG_DIR / "paper_homogeneous.yaml")
    assert (c.loop.seed, c.lora.n_agents, c.lora.rank, c.lora.alpha, c.lora.dropout) == (
        42,
        4,
        16,
        32.0,
        0.05,
    )
    assert (c.rl.learning_rate, c.rl.warmup_steps, c.rl.beta, c.rl.eps_low) == (
        3e-5,
        600,
        1e-4,
        0.2,
    )
    assert (c.router.lam, c.router.tau, c.router.margin, c.router.lr) == (2.0, 0.7, 1.0, 1e-4)
    assert (c.rollout.group_size, c.rollout.max_new_tokens, c.data.max_input_tokens) == (
        8,
        1000,
        800,
    )
    assert (c.loop.queries_per_round, c.loop.groups_per_step) == (16, 16)
    # the paper's "at most 6000 optimisation steps" over all agents: a per-agent budget
    assert c.loop.max_policy_steps * c.lora.n_agents == 6000
    h = load_config(CONFIG_DIR / "paper_heterogeneous.yaml")
    assert h.setting == "heterogeneous" and (h.router.c_ucb, h.router.w_ent) == (0.2, 0.2)
    assert len(h.agent_models) == 3


def test_unknown_key_names_its_path(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("router:\n  tau: 0.7\n  taus: 0.5\n")
    with pytest.raises(ConfigError, match=r"router\.taus"):
        load_config(p)


def test_an_error_blames_the_override_or_the_file_whichever_is_wrong(tmp_path):
    good = CONFIG_DIR / "cpu_default.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(good, ["loop.rounds=3", "rl.learning_rat=1"])
    msg = str(e.value)
    assert msg.startswith("command-line override (loop.rounds=3 rl.learning_rat=1): ")
    assert "rl.learning_rat" in msg and str(good) not in msg
    bad = tmp_path / "bad.yaml"
    bad.write_text("router:\n  taus: 0.5\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad, ["loop.rounds=3"])
    assert str(e.value).startswith(f"{bad}: ") and "router.taus" in str(e.value)


def test_invariant_violation_is_explained():
    with pytest.raises(ConfigError, match="fallback"):
        from_dict(TrainConfig, {"router": {"n_agents": 4, "lam": 0.5}})


def test_overrides_and_cross_checks():
    cfg = load_config(CONFIG_DIR / "cpu_default.yaml", ["loop.rounds=3", "router.tau=0.6"])
    assert cfg.loop.rounds == 3 and cfg.router.tau == 0.6
    with pytest.raises(ConfigError, match="n_agents"):
        from_dict(TrainConfig, {"lora": {"n_agents": 3}})
    with pytest.raises(ConfigError, match="urls"):
        from_dict(TrainConfig, {"rollout": {"engine": "http"}})
    with pytest.raises(ConfigError, match="vllm_dtype"):
        from_dict(TrainConfig, {"rollout": {"vllm_dtype": "bf16"}})
    with pytest.raises(ConfigError, match="not found"):
        load_config(Path("/nonexistent.yaml"))


@pytest.mark.parametrize(
    ("rollout", "rl", "want"),
    [
        ({}, {}, "engine"),
        ({"engine": "http", "urls": ["http://h:1"]}, {}, "recompute"),
        ({"engine": "vllm"}, {}, "recompute"),
        ({"engine": "vllm"}, {"behavior_logprobs": "engine"}, "engine"),
        ({}, {"behavior_logprobs": "recompute"}, "recompute"),
    ],
)
def test_behavior_logprobs_auto_follows_the_rollout_engine(rollout, rl, want):
    """``rl.behavior_logprobs: auto`` (the default) is the trainer's recompute behind a
    server and the engine's own log-probs in process; an explicit choice is kept."""
    cfg = from_dict(TrainConfig, {"rollout": rollout, "rl": rl})
    assert cfg.rl.behavior_logprobs == want


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (TrainConfig, {"loop": {"probe_size": 0}}, "loop: probe_size must be >= 1, got 0"),
        (TrainConfig, {"router": {"hidden": 0}}, "router: hidden must be >= 1, got 0"),
        (EvoChamberConfig, {"temperature": -0.5}, "must be >= 0, got -0.5"),
        (EvoChamberConfig, {"fork_window": 0}, "fork_window must be >= 1, got 0"),
    ],
)
def test_range_checks_name_the_field_alike_in_every_config(cls, data, message):
    """One range check (``_config.check_at_least``) serves the loop, router and EvoChamber
    configs: the message names the section, the field, the bound and the value."""
    with pytest.raises(ConfigError) as e:
        from_dict(cls, data)
    assert str(e.value).endswith(message), str(e.value)


def test_gpu_split_keys_default_to_no_split():
    cfg = TrainConfig()
    ro, par = cfg.rollout, cfg.parallel
    assert (ro.vllm_device, ro.devices, ro.tensor_parallel_size) == ("auto", (), None)
    assert (ro.gpu_memory_utilization, ro.max_num_seqs, ro.tensor_parallel) == (0.85, 256, 1)
    assert (par.devices, par.memory_fraction) == ((), None)
    split = load_config(None, ["rollout.devices=[4,5,6,7]", "parallel.devices=[0,1,2,3]"])
    assert split.rollout.tensor_parallel == 4  # one server on all of rollout.devices
    two = load_config(None, ["rollout.devices=[4,5,6,7]", "rollout.tensor_parallel_size=2"])
    assert two.rollout.tensor_parallel == 2


def test_trainer_and_vllm_devices_must_not_overlap():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.devices=[3,4]", "parallel.devices=[0,1,2,3]"])
    assert "parallel.devices (0, 1, 2, 3) and rollout.devices (3, 4) overlap on GPU(s) [3]" in str(
        e.value
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (["rollout.vllm_device=tpu"], "vllm_device must be one of"),
        (["rollout.devices=[1,1]"], "rollout.devices must be distinct"),
        (["parallel.devices=[-1]"], "parallel.devices must be distinct"),
        (["rollout.devices=[1,2,3]", "rollout.tensor_parallel_size=2"], "cannot be cut"),
        (["rollout.devices=[1]", "rollout.vllm_device=cpu"], "vllm_device is cpu"),
        (["rollout.tensor_parallel_size=0"], "tensor_parallel_size must be >= 1"),
        (["rollout.gpu_memory_utilization=1.2"], "gpu_memory_utilization must be in"),
        (["rollout.max_num_seqs=0"], "max_num_seqs >= 1"),
        (["parallel.memory_fraction=0"], "memory_fraction must be in"),
    ],
)
def test_gpu_split_keys_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, override)
