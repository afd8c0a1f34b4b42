import pytest

from coevo_jax.cli import main

SUBCOMMANDS = ("generate", "merge", "data", "train", "eval", "serve", "evochamber", "flyroute")


def test_train_refuses_to_overwrite_an_existing_run(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["train", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"coevo train: {tmp_path} already holds a run; continue it with "
        f"`coevo train --resume {tmp_path}` or choose another --out\n"
    )


def test_resume_needs_a_run_directory(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"coevo train --resume: {tmp_path / 'config.json'} not found (not a run directory)\n"
    )


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    listed = [ln.split()[0] for ln in out.splitlines() if ln.startswith("    ") and ln.split()]
    assert [c for c in listed if c in SUBCOMMANDS] == list(SUBCOMMANDS)  # in help order
