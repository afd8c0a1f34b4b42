import pytest

from coevo_jax.cli import main


def test_train_refuses_to_overwrite_an_existing_run(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(SystemExit, match="--resume"):
        main(["train", "--out", str(tmp_path)])


def test_resume_needs_a_run_directory(tmp_path):
    with pytest.raises(SystemExit, match="config.json"):
        main(["train", "--resume", str(tmp_path)])


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("train", "generate", "data", "serve", "eval", "evochamber", "flyroute"):
        assert cmd in out
