"""``coevo_jax._config``: every value checked against its field's type, one-line errors that name
the key, the value, the type and the source, "did you mean", and bundled configs by name."""

import dataclasses
from typing import Literal

import pytest

from coevo_jax._config import (
    BUNDLED_CONFIG_DIR,
    ConfigError,
    describe,
    from_dict,
    load_yaml,
    register_renames,
    resolve_config,
)
from coevo_jax.train.config import TRL_NAMES, TrainConfig, load_config


@dataclasses.dataclass(frozen=True)
class Inner:
    width: int = 1
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class Toy:
    count: int = 1
    rate: float = 0.5
    flag: bool = False
    label: str = "x"
    modules: tuple[str, ...] = ()
    pair: tuple[int, float] = (1, 2.0)
    mode: Literal["a", "b"] = "a"
    limit: int | None = None
    remat: bool | Literal["full", "dots"] = True
    inner: Inner = Inner()
    maybe_inner: Inner | None = None
    inners: tuple[Inner, ...] = ()

    def __post_init__(self):
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")


register_renames(Toy, "OtherLib", {"num_items": "count"})

GOOD = [
    ({"count": 3}, "count", 3),
    ({"rate": 2}, "rate", 2.0),  # an int is a fine float
    ({"rate": "1e-4"}, "rate", 1e-4),  # YAML 1.1 reads 1e-4 as a string
    ({"flag": True}, "flag", True),
    ({"modules": "gate"}, "modules", ("gate",)),  # one value: a one-element tuple
    ({"modules": ["q", "v"]}, "modules", ("q", "v")),
    ({"pair": [3, 4]}, "pair", (3, 4.0)),
    ({"mode": "b"}, "mode", "b"),
    ({"limit": None}, "limit", None),
    ({"limit": 7}, "limit", 7),
    ({"remat": False}, "remat", False),
    ({"remat": "dots"}, "remat", "dots"),
    ({"inner": {"width": 2}}, "inner", Inner(width=2)),
    ({"maybe_inner": {"name": "n"}}, "maybe_inner", Inner(name="n")),
    ({"maybe_inner": None}, "maybe_inner", None),
    ({"inners": {"width": 4}}, "inners", (Inner(width=4),)),
]


@pytest.mark.parametrize(("data", "key", "want"), GOOD, ids=[str(g[0]) for g in GOOD])
def test_good_values_are_kept_or_widened(data, key, want):
    got = getattr(from_dict(Toy, data), key)
    assert got == want and type(got) is type(want)


BAD = [
    ({"count": "abc"}, "count: expected an integer, got 'abc'"),
    ({"count": 2.5}, "count: expected an integer, got 2.5"),
    ({"count": True}, "count: expected an integer, got true"),
    ({"rate": "fast"}, "rate: expected a number, got 'fast'"),
    ({"rate": False}, "rate: expected a number, got false"),
    ({"flag": "maybe"}, "flag: expected true or false, got 'maybe'"),
    ({"flag": 1}, "flag: expected true or false, got 1"),
    ({"label": 5}, "label: expected a string, got 5"),
    ({"modules": ["q", 3]}, "modules[1]: expected a string, got 3"),
    ({"pair": [1, 2, 3]}, "pair: expected a list of 2 (an integer, a number), got 3 items"),
    ({"mode": "c"}, "mode: expected one of 'a', 'b', got 'c'"),
    ({"limit": "none"}, "limit: expected an integer or null, got 'none'"),
    ({"remat": "maybe"}, "remat: expected true or false or one of 'full', 'dots', got 'maybe'"),
    ({"inner": 3}, "inner: expected a mapping of Inner keys, got 3"),
    ({"inner": {"width": "w"}}, "inner.width: expected an integer, got 'w'"),
    ({"inners": [{"width": 1}, "x"]}, "inners[1]: expected a mapping of Inner keys, got 'x'"),
    ({"count": -1}, "Toy: count must be >= 0, got -1"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[str(b[0]) for b in BAD])
def test_bad_values_name_the_key_the_value_and_the_type(data, message):
    with pytest.raises(ConfigError) as e:
        from_dict(Toy, data)
    assert str(e.value) == message


def test_describe_reads_as_words():
    assert describe(int | None) == "an integer or null"
    assert describe(tuple[str, ...]) == "a list of a string"
    assert describe(Literal["x"]) == "one of 'x'"


def test_unknown_keys_get_a_hint():
    with pytest.raises(ConfigError) as e:
        from_dict(Toy, {"coutn": 1})
    assert str(e.value) == "unknown config key(s) coutn (did you mean count?) for Toy"
    with pytest.raises(ConfigError) as e:
        from_dict(Toy, {"inner": {"label": "x"}})  # a key of another section
    assert str(e.value) == "unknown config key(s) inner.label (did you mean label?) for Inner"
    with pytest.raises(ConfigError) as e:
        from_dict(Toy, {"inner": {"num_items": 3}})  # another library's name, in any section
    assert (
        str(e.value)
        == "unknown config key(s) inner.num_items (OtherLib's name; use count) for Inner"
    )
    with pytest.raises(ConfigError) as e:
        from_dict(Toy, {"zzz": 1})  # nothing near: the known keys
    assert str(e.value).startswith("unknown config key(s) zzz for Toy; known keys: count, flag,")


def _fields(section: str) -> set[str]:
    return {f.name for f in dataclasses.fields(getattr(TrainConfig(), section))}


@pytest.mark.parametrize("trl_name", sorted(TRL_NAMES))
@pytest.mark.parametrize("section", ["", "rl.", "rollout."])
def test_trl_names_are_told_our_key(trl_name, section):
    data = {trl_name: 1} if not section else {section[:-1]: {trl_name: 1}}
    if section and trl_name in _fields(section[:-1]):
        pytest.skip(f"{section}{trl_name} is our own key")  # rl.max_completion_length, for now
    with pytest.raises(ConfigError) as e:
        from_dict(TrainConfig, data)
    assert f"{section}{trl_name} (TRL's name; use {TRL_NAMES[trl_name]})" in str(e.value)


def test_every_trl_target_is_one_of_our_keys():
    for target in TRL_NAMES.values():
        section, key = target.split(".")
        assert key in _fields(section)


def test_single_values_become_tuples_in_a_run_config():
    cfg = load_config(
        None, ["rollout.engine=http", "rollout.urls=http://x", "lora.target_modules=gate"]
    )
    assert cfg.rollout.urls == ("http://x",) and cfg.lora.target_modules == ("gate",)


def test_errors_name_their_source(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["loop.seed=abc"])
    assert str(e.value) == (
        "command-line override (loop.seed=abc): loop.seed: expected an integer, got 'abc'"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop:\n  rounds: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert str(e.value) == f"{bad}: loop.rounds: expected an integer, got 'many'"


def test_bundled_configs_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    want = BUNDLED_CONFIG_DIR / "cpu_reference.yaml"
    assert resolve_config("cpu_reference") == want
    assert resolve_config("cpu_reference.yaml") == want
    assert load_yaml(TrainConfig, "cpu_reference") == load_config(want)
    own = tmp_path / "cpu_reference.yaml"  # a file of the same name in the working directory
    own.write_text("loop:\n  rounds: 1\n")
    assert resolve_config("cpu_reference.yaml") == own.relative_to(tmp_path)
    with pytest.raises(ConfigError, match="config file not found: /nonexistent.yaml"):
        resolve_config("/nonexistent.yaml")
    with pytest.raises(ConfigError, match="did you mean cpu_default?"):
        resolve_config("cpu_defualt")
