"""``coevo``: a user's mistake prints one line, ``coevo <command>: <message>``, and exits 2; a
bug keeps its traceback. At least one case per subcommand listed by ``coevo --help``, and
every bad input of issue 49 (typed config values, TRL's names, a damaged run, a missing vLLM)."""

import subprocess
import sys

import pytest

from coevo_jax import cli
from coevo_jax._config import ConfigError
from coevo_jax._errors import UserError, user_message
from coevo_jax.data.mixtures import MIXTURES

CASES = {
    "train unknown key": (
        ["train", "rl.learning_rat=1"],
        "coevo train: command-line override (rl.learning_rat=1): ",
        "unknown config key(s) rl.learning_rat (did you mean rl.learning_rate?) for RLConfig",
    ),
    "train key in another section": (
        ["train", "learning_rate=1e-5"],
        "coevo train: ",
        "unknown config key(s) learning_rate (did you mean rl.learning_rate?) for TrainConfig",
    ),
    "train not an integer": (
        ["train", "loop.rounds=abc"],
        "coevo train: command-line override (loop.rounds=abc): "
        "loop.rounds: expected an integer, got 'abc'",
        None,
    ),
    "train a fractional count": (
        ["train", "loop.rounds=2.5"],
        "coevo train: command-line override (loop.rounds=2.5): "
        "loop.rounds: expected an integer, got 2.5",
        None,
    ),
    "train a text seed": (
        ["train", "loop.seed=abc"],
        "coevo train: command-line override (loop.seed=abc): loop.seed: expected an integer",
        None,
    ),
    "train remat neither bool nor policy": (
        ["train", "rl.remat=maybe"],
        "coevo train: command-line override (rl.remat=maybe): rl",
        "'maybe'",
    ),
    "train bool for a number": (
        ["train", "rollout.temperature=true"],
        "coevo train: command-line override (rollout.temperature=true): "
        "rollout.temperature: expected a number, got true",
        None,
    ),
    "train TRL num_generations": (
        ["train", "num_generations=4"],
        "coevo train: ",
        "num_generations (TRL's name; use rollout.group_size)",
    ),
    "train TRL max_completion_length in rollout": (
        ["train", "rollout.max_completion_length=64"],
        "coevo train: ",
        "rollout.max_completion_length (TRL's name; use rollout.max_new_tokens)",
    ),
    "train TRL epsilon_high": (
        ["train", "rl.epsilon_high=0.28"],
        "coevo train: ",
        "rl.epsilon_high (TRL's name; use rl.eps_high)",
    ),
    "train unknown config name": (
        ["train", "--config", "cpu_refrence"],
        "coevo train: no config file or bundled config named 'cpu_refrence'; "
        "did you mean cpu_reference?",
        None,
    ),
    "train resume damaged config": (
        ["train", "--resume", "{tmp}/damaged"],
        "coevo train: {tmp}/damaged/config.json: not valid JSON",
        "the run's saved config is damaged",
    ),
    "train vllm without its venv": (
        ["train", "rollout.engine=vllm", "--out", "{tmp}/runs/vllm"],
        "coevo train: no vLLM venv at {tmp}/no-vllm-venv: ",
        "or set rollout.vllm_python=PATH",
    ),
    "configs unknown name": (
        ["configs", "nosuch"],
        "coevo configs: no config file or bundled config named 'nosuch'",
        "bundled: cpu_conflict,",
    ),
    "train missing config": (
        ["train", "--config", "/nonexistent.yaml"],
        "coevo train: config file not found: /nonexistent.yaml",
        None,
    ),
    "train resume not a run": (
        ["train", "--resume", "/nonexistent"],
        "coevo train --resume: /nonexistent/config.json not found (not a run directory)",
        None,
    ),
    "eval not a run": (
        ["eval", "--run", "/nonexistent"],
        "coevo eval: /nonexistent/config.json: not a training run directory",
        None,
    ),
    "eval unknown suite": (
        ["eval", "--run", "/nonexistent", "--suite", "nosuch"],
        "coevo eval: unknown suite 'nosuch': use cpu, id, ood or the path of a JSONL file",
        None,
    ),
    "eval damaged run config": (
        ["eval", "--run", "{tmp}/damaged"],
        "coevo eval: {tmp}/damaged/config.json: not valid JSON",
        None,
    ),
    "eval vllm without its venv": (
        ["eval", "--run", "{tmp}/vllm_run"],
        "coevo eval: no vLLM venv at {tmp}/no-vllm-venv: ",
        "or pass --vllm-python PATH",
    ),
    "eval compare without report": (
        ["eval", "--compare", "/nonexistent"],
        "coevo eval: /nonexistent: no eval report; run `coevo eval --run /nonexistent` first",
        None,
    ),
    "generate bad model": (
        ["generate", "--prompt", "hi", "--model", "/nonexistent"],
        "coevo generate: model path not found: /nonexistent",
        None,
    ),
    "generate not a gguf": (
        ["generate", "--prompt", "hi", "--model", "{tmp}/fake.gguf"],
        "coevo generate: {tmp}/fake.gguf is not a GGUF file: it starts with b'hell'",
        None,
    ),
    "generate top-p out of range": (
        ["generate", "--prompt", "hi", "--top-p", "2"],
        "coevo generate: --top-p must be in (0, 1], got 2.0",
        None,
    ),
    "generate negative temperature": (
        ["generate", "--prompt", "hi", "--temperature", "-1"],
        "coevo generate: --temperature must be finite and >= 0, got -1.0",
        None,
    ),
    "merge not an adapter": (
        ["merge", "--adapter", "/nonexistent", "--out", "{tmp}/merged"],
        "coevo merge: /nonexistent/adapter_config.json: missing (not a PEFT LoRA adapter directory)",
        None,
    ),
    "data show missing file": (
        ["data", "show", "/nonexistent.jsonl"],
        "coevo data show: No such file or directory: /nonexistent.jsonl",
        None,
    ),
    "data show malformed line": (
        ["data", "show", "{tmp}/bad.jsonl"],
        "coevo data show: {tmp}/bad.jsonl:1: record 'x' field 'source': missing",
        None,
    ),
    "train unknown mixture": (
        ["train", "data.mixture=nosuch"],
        "coevo train: command-line override (data.mixture=nosuch): data: unknown mixture "
        f"'nosuch'; known: {', '.join(sorted(MIXTURES))}",
        None,
    ),
    "data build unknown source": (
        ["data", "build", "--mixture", "paper", "--out", "{tmp}/d", "--local", "nosuch=/x"],
        "coevo data build: --local: unknown source 'nosuch'; known: agieval,",
        None,
    ),
    "serve bad model": (
        ["serve", "--engine", "inprocess", "--model", "/nonexistent"],
        "coevo serve: model path not found: /nonexistent",
        None,
    ),
    "serve missing random config": (
        ["serve", "--engine", "inprocess", "--random-config", "/nonexistent.json"],
        "coevo serve: model config not found: /nonexistent.json",
        None,
    ),
    "serve bad random config": (
        ["serve", "--engine", "inprocess", "--random-config", "{tmp}/config.json"],
        "coevo serve: {tmp}/config.json: missing field 'hidden_size'",
        None,
    ),
    "serve vllm without its venv": (
        ["serve", "--engine", "vllm"],
        "coevo serve: no vLLM venv at {tmp}/no-vllm-venv: ",
        "or pass --vllm-python PATH",
    ),
    "serve random config with vllm": (
        ["serve", "--engine", "vllm", "--random-config", "{tmp}/config.json"],
        "coevo serve: --random-config is for --engine inprocess",
        None,
    ),
    "evochamber missing data": (
        ["evochamber", "--stream", "hard_math", "--out", "{tmp}/e", "--data", "/nonexistent"],
        "coevo evochamber: data directory not found: /nonexistent",
        None,
    ),
    "evochamber missing config": (
        [
            "evochamber",
            "--stream",
            "hard_math",
            "--out",
            "{tmp}/e",
            "--config",
            "/nonexistent.yaml",
        ],
        "coevo evochamber: config file not found: /nonexistent.yaml",
        None,
    ),
    "evochamber unknown key": (
        ["evochamber", "--stream", "hard_math", "--out", "{tmp}/e", "--set", "nosuch=1"],
        "coevo evochamber: command-line override (nosuch=1): "
        "unknown config key(s) nosuch for EvoChamberConfig; known keys: alpha,",
        None,
    ),
    "evochamber positional bad value": (
        ["evochamber", "--stream", "hard_math", "--out", "{tmp}/e", "alpha=abc"],
        "coevo evochamber: command-line override (alpha=abc): alpha: expected a number, got 'abc'",
        None,
    ),
    "flyroute unknown key": (
        ["flyroute", "replay", "--out", "{tmp}/f", "--set", "nosuch=1"],
        "coevo flyroute: command-line override (nosuch=1): "
        "unknown config key(s) nosuch for FlyRouteConfig; known keys:",
        None,
    ),
    "flyroute positional typo": (
        ["flyroute", "replay", "--out", "{tmp}/f", "thetta=0.5"],
        "coevo flyroute: command-line override (thetta=0.5): ",
        "unknown config key(s) thetta (did you mean theta?) for FlyRouteConfig",
    ),
    "flyroute bundled name of another config": (
        ["flyroute", "replay", "--out", "{tmp}/f", "--config", "cpu_default"],
        "coevo flyroute: ",
        "unknown config key(s)",
    ),
    "plan missing config": (
        ["plan", "--config", "/nonexistent.yaml", "--devices", "8"],
        "coevo plan: config file not found: /nonexistent.yaml",
        None,
    ),
    "plan no devices": (
        ["plan", "--config", "cpu_default", "--devices", "0"],
        "coevo plan: --devices must be >= 1, got 0",
        None,
    ),
    "flyroute missing results": (
        ["flyroute", "report", "/nonexistent.json"],
        "coevo flyroute: results file not found: /nonexistent.json",
        None,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_user_error_is_one_line_and_exit_2(name, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `coevo train` without --out creates runs/<name>-<stamp> here
    monkeypatch.setenv("COEVO_VLLM_VENV", str(tmp_path / "no-vllm-venv"))
    argv, prefix, contains = CASES[name]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    prefix = prefix.replace("{tmp}", str(tmp_path))
    (tmp_path / "bad.jsonl").write_text('{"id": "x"}\n')  # a record with no source
    (tmp_path / "fake.gguf").write_text("hello")  # not a GGUF
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')  # no sizes
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "config.json").write_text('{"loop": ')  # a run cut off mid-write
    (tmp_path / "vllm_run").mkdir()
    (tmp_path / "vllm_run" / "config.json").write_text('{"rollout": {"engine": "vllm"}}')
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "", out  # the message goes to stderr alone: no traceback, no run directory
    lines = err.splitlines()
    assert len(lines) == 1, err  # one line: no traceback, no usage dump
    assert lines[0].startswith(prefix), lines[0]
    if contains:
        assert contains in lines[0], lines[0]
    runs = tmp_path / "runs"
    assert not runs.exists() or not list(runs.iterdir()), "a failed start left a run directory"


def test_every_subcommand_has_a_case():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    covered = {argv[0] for argv, _, _ in CASES.values()}
    assert set(sub.choices) <= covered, set(sub.choices) - covered


def test_console_script_prints_no_traceback(tmp_path):
    """The installed entry point, as a user types it."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from coevo_jax.cli import main; sys.exit(main())",
            "train",
            "--config",
            "/nonexistent.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr == "coevo train: config file not found: /nonexistent.yaml\n"


def test_bug_keeps_its_traceback(monkeypatch):
    """An exception that is not the user's propagates unchanged."""

    def broken(args):
        raise ValueError("an internal invariant broke")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["train"].set_defaults(func=broken)
    with pytest.raises(ValueError, match="internal invariant"):
        cli.main(["train"])


def test_traceback_on_request(monkeypatch):
    monkeypatch.setenv("COEVO_TRACEBACK", "1")
    with pytest.raises(ConfigError, match="config file not found"):
        cli.main(["train", "--config", "/nonexistent.yaml"])


def test_user_message():
    assert user_message(ConfigError("a.b: bad\n  value")) == "a.b: bad value"
    assert issubclass(ConfigError, UserError) and issubclass(ConfigError, ValueError)
    try:
        open("/nonexistent/file")
    except FileNotFoundError as e:
        assert user_message(e) == "No such file or directory: /nonexistent/file"
    assert user_message(ValueError("bug")) is None
    assert user_message(PermissionError("disk")) is None
