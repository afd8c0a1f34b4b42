import pytest

from coevo_jax._config import ConfigError, from_dict, load_yaml
from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig


def test_defaults_follow_the_seed():
    cfg = EvoChamberConfig()
    assert cfg.pool_size == 20 and cfg.team_size == 3 and cfg.q_init == 0.5
    assert set(cfg.structures) == {"voting", "debate", "generator-critic", "decompose"}


@pytest.mark.parametrize(
    "bad",
    [
        {"alpha": 0.0},
        {"beta": 1.5},
        {"team_size": 4},
        {"pool_size": 2, "min_pool": 3},
        {"credit": "shared"},
        {"structures": ["voting", "chat"]},
        {"structures": ["debate"], "fallback_structure": "voting"},
        {"tau": 0},
        {"lambda_q": -1.0},
    ],
)
def test_invalid_values_are_rejected(bad):
    with pytest.raises(ConfigError):
        from_dict(EvoChamberConfig, bad)


def test_yaml_round_trip_and_unknown_key(tmp_path):
    p = tmp_path / "evo.yaml"
    p.write_text("alpha: 0.2\nstructures: [voting, debate]\ntau: 5\n")
    cfg = load_yaml(EvoChamberConfig, p)
    assert cfg.alpha == 0.2 and cfg.structures == ("voting", "debate") and cfg.tau == 5
    p.write_text("alpah: 0.2\n")
    with pytest.raises(ConfigError, match="alpah"):
        load_yaml(EvoChamberConfig, p)
