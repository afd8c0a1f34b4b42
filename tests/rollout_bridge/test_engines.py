"""One engine vocabulary: the registry, its builders, its alias, and no name compared as a
string anywhere else."""

import argparse
import re
from pathlib import Path

import pytest

from rollout_bridge.engines import ENGINES, canonical_engine, engine_arg, engine_names, engine_spec

ROOT = Path(__file__).resolve().parents[2]


def test_every_engine_has_a_builder_and_the_config_takes_every_name():
    from coevo_jax.train.config import ENGINES as CONFIG_ENGINES
    from coevo_jax.train.setup import ENGINE_BUILDERS

    assert set(ENGINE_BUILDERS) == set(ENGINES) == set(CONFIG_ENGINES)
    assert engine_names() == ("inprocess", "http", "vllm")


def test_properties_say_what_the_name_checks_used_to():
    inprocess, http, vllm = (engine_spec(n) for n in ("inprocess", "http", "vllm"))
    assert inprocess.exact_logprobs and inprocess.loads_weights and not inprocess.adapter_files
    assert http.needs_urls and http.adapter_files and not http.exact_logprobs
    assert vllm.needs_vllm and vllm.adapter_files and not vllm.needs_urls


def test_local_is_an_alias_for_one_release(capsys):
    assert canonical_engine("local") == "inprocess"
    assert "kept as an alias for one release" in capsys.readouterr().err
    assert engine_spec("local").name == "inprocess"
    from coevo_jax._config import from_dict
    from coevo_jax.train.config import RolloutSpec

    assert from_dict(RolloutSpec, {"engine": "local"}).engine == "inprocess"


def test_an_unknown_engine_names_the_choices_and_the_closest():
    with pytest.raises(ValueError, match=r"unknown engine 'vlm' \(did you mean 'vllm'\?\)"):
        canonical_engine("vlm")
    with pytest.raises(argparse.ArgumentTypeError, match="choose from inprocess, http, vllm"):
        engine_arg("bogus")


COMPARE = re.compile(
    r"""(==|!=)\s*["'](inprocess|http|vllm|local)["']"""
    r"""|["'](inprocess|http|vllm|local)["']\s*(==|!=)"""
    r"""|\bin\s*[(\[{]\s*["'](inprocess|http|vllm|local)["']"""
)


def test_no_engine_name_is_compared_as_a_string_outside_the_factory():
    """Code asks an EngineSpec property; the names live in rollout_bridge/engines.py."""
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for pkg in ("coevo_jax", "rollout_bridge")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        if path != ROOT / "rollout_bridge" / "engines.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if COMPARE.search(line)
    ]
    assert not hits, "\n".join(hits)
