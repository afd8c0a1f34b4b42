"""One grammar for every ``coevo`` command (issue 49): bundled configs by name, ``--print-config``,
``coevo configs``, positional ``key=value`` overrides (``--set`` an alias), help on every option,
``--version``, and a parser that loads no JAX."""

import argparse
import subprocess
import sys

import pytest
import yaml

from coevo_jax import cli
from coevo_jax._config import bundled_configs, config_description, load_yaml
from coevo_jax.train.config import TrainConfig

# Options of modules outside this change that still lack help text (coevo_jax/lora/cli.py,
# coevo_jax/data/cli.py); remove an entry once its module gives the help.
HELP_TODO = {
    ("merge", "--no-progress"),
    ("data build", "--mixture"),
    ("data show", "file"),
    ("data show", "--class"),
    ("data show", "--source"),
}


def _commands(parser: argparse.ArgumentParser, name: str = ""):
    """(command name, its parser) for every leaf command under ``parser``."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield name, parser
    for action in subs:
        for sub_name, sub in action.choices.items():
            yield from _commands(sub, f"{name} {sub_name}".strip())


def test_every_option_has_help():
    missing = set()
    for name, parser in _commands(cli.build_parser()):
        for action in parser._actions:
            if not action.help and not isinstance(action, argparse._HelpAction):
                missing.add((name, (action.option_strings or [action.dest])[0]))
    assert missing <= HELP_TODO, missing - HELP_TODO


def test_flyroute_overwrite_says_what_it_replaces():
    replay = dict(_commands(cli.build_parser()))["flyroute replay"]
    (overwrite,) = [a for a in replay._actions if "--overwrite" in a.option_strings]
    assert "replace" in overwrite.help and "reuse" not in overwrite.help


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("coevo ")


def test_building_the_parser_loads_no_jax():
    """``coevo --help`` and ``coevo <cmd> --help`` build this parser: it must not import the
    heavy libraries or the loop (the timing itself is a figure in benchmarks/README.md)."""
    heavy = ("jax", "flax", "scipy", "matplotlib", "torch", "coevo_jax.train.loop")
    code = (
        "import sys; from coevo_jax.cli import build_parser; build_parser(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_print_config_is_the_resolved_config(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bundled name works from any directory
    argv = ["train", "--config", "cpu_reference", "--print-config", "loop.rounds=3"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and not (tmp_path / "runs").exists()
    printed = tmp_path / "printed.yaml"
    printed.write_text(out)
    assert load_yaml(TrainConfig, printed) == load_yaml(
        TrainConfig, "cpu_reference", ["loop.rounds=3"]
    )
    assert yaml.safe_load(out)["loop"]["rounds"] == 3


def test_print_config_of_a_damaged_run_is_a_user_error(capsys, tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    assert cli.main(["train", "--resume", str(tmp_path), "--print-config"]) == 2
    assert "expected a mapping of TrainConfig keys" in capsys.readouterr().err


def test_configs_lists_every_bundled_config_on_one_line(capsys):
    assert cli.main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(bundled_configs())
    default = next(ln for ln in lines if ln.startswith("cpu_default "))
    assert "The default `coevo train`" in default


def test_configs_prints_one_with_its_comments(capsys):
    assert cli.main(["configs", "cpu_default"]) == 0
    assert capsys.readouterr().out == bundled_configs()["cpu_default"].read_text()


def test_config_description_is_the_first_sentence(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("# A short run. More words\n# here.\n#\n# Later.\nloop:\n  rounds: 1\n")
    assert config_description(p) == "A short run."
    p.write_text("loop:\n  rounds: 1\n")
    assert config_description(p) == ""
    p.write_text("# " + "word " * 40 + "\n")
    assert len(config_description(p, width=30)) <= 30


def test_train_vllm_names_only_its_own_options(capsys, tmp_path, monkeypatch):
    """`train` has no --vllm-python: its message must not suggest one."""
    monkeypatch.setenv("COEVO_VLLM_VENV", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "rollout.engine=vllm"]) == 2
    err = capsys.readouterr().err
    assert "--vllm-python" not in err and "rollout.vllm_python=PATH" in err
    assert not (tmp_path / "runs").exists()  # failed before the run directory and its data
    missing = tmp_path / "python"
    assert cli.main(["train", "rollout.engine=vllm", f"rollout.vllm_python={missing}"]) == 2
    assert capsys.readouterr().err == (
        f"coevo train: rollout.vllm_python {missing}: no such file\n"
    )


def _parse(argv):
    return cli.build_parser().parse_args(argv)


def test_evochamber_takes_positional_overrides_and_set():
    args = _parse(["evochamber", "--stream", "aflow", "--out", "o", "alpha=0.2", "--set", "seed=3"])
    assert (args.key_values, args.overrides) == (["alpha=0.2"], ["seed=3"])


@pytest.mark.parametrize("action", ["replay", "eval"])
def test_flyroute_takes_positional_overrides_and_set(action):
    extra = ["--profiles", "p.json"] if action == "eval" else []
    args = _parse(["flyroute", action, "--out", "o", *extra, "theta=0.6", "--set", "seed=1"])
    assert (args.key_values, args.set) == (["theta=0.6"], ["seed=1"])


def test_flyroute_overrides_reach_the_config():
    from coevo_jax.orchestrators.flyroute import cli as flyroute_cli

    args = _parse(["flyroute", "replay", "--out", "o", "theta=0.6", "--set", "seed=1"])
    cfg = flyroute_cli._config(args)
    assert (cfg.theta, cfg.seed) == (0.6, 1)
