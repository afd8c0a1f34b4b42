import argparse
import json

import pytest

from coevo_jax.orchestrators.flyroute import cli

from . import flyroute_fakes
from .flyroute_fakes import make_records

FACTORY = f"{flyroute_fakes.__name__}:make_llm"


def _run(argv):
    parser = argparse.ArgumentParser(prog="coevo")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def records(tmp_path):
    p = tmp_path / "records.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in make_records(12)) + "\n")
    return p


def test_replay_eval_report(tmp_path, records, capsys):
    out = tmp_path / "run"
    common = [
        "--records",
        str(records),
        "--llm",
        FACTORY,
        "--no-progress",
        "--set",
        "distill_every=2",
    ]
    assert _run(["flyroute", "replay", "--out", str(out), "--checkpoint-every", "5", *common]) == 0
    res = json.loads((out / "results.json").read_text())
    assert [c["step"] for c in res["checkpoints"]] == [0, 5, 10, 15, 20]
    assert res["config"]["distill_every"] == 2
    assert "LLM router (seed descriptions)" in res["baselines"]
    for f in ("report.md", "accuracy.png", "growth.png", "profiles.journal.jsonl"):
        assert (out / f).is_file()
    printed = capsys.readouterr().out
    assert "| FlyRoute | 20 | 100.0 |" in printed
    with pytest.raises(SystemExit, match="exists"):
        _run(["flyroute", "replay", "--out", str(out), *common])

    ck = out / res["checkpoints"][-1]["profiles"]
    assert (
        _run(["flyroute", "eval", "--profiles", str(ck), "--out", str(tmp_path / "ev"), *common])
        == 0
    )
    ev = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert ev["accuracy"] == 1.0 and len(ev["predictions"]) == ev["n"]
    (out / "report.md").unlink()
    assert _run(["flyroute", "report", str(out / "results.json")]) == 0
    assert (out / "report.md").is_file()


def test_errors_are_clear(tmp_path, records):
    base = ["flyroute", "replay", "--out", str(tmp_path / "o"), "--no-progress"]
    with pytest.raises(SystemExit, match="cannot load LLM factory"):
        _run([*base, "--records", str(records), "--llm", "nope.module:make"])
    with pytest.raises(SystemExit, match="MODULE:FACTORY"):
        _run([*base, "--records", str(records), "--llm", "scripted"])
    with pytest.raises(SystemExit, match="records file not found"):
        _run([*base, "--records", str(tmp_path / "missing.jsonl"), "--llm", FACTORY])
    with pytest.raises(SystemExit, match="unknown config key"):
        _run([*base, "--records", str(records), "--llm", FACTORY, "--set", "thetta=1"])
    with pytest.raises(SystemExit, match="profile file not found"):
        _run(
            [
                "flyroute",
                "eval",
                "--profiles",
                str(tmp_path / "p.jsonl"),
                "--out",
                str(tmp_path),
                "--records",
                str(records),
                "--llm",
                FACTORY,
            ]
        )
