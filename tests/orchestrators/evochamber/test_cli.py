import argparse
import json

import pytest

from coevo_jax.orchestrators.evochamber import cli
from coevo_jax.orchestrators.evochamber.scripted import ScriptedLLM, boxed_reward


def parser():
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    return p


def test_register_parses_the_documented_flags():
    a = parser().parse_args(
        [
            "evochamber",
            "--stream",
            "aflow",
            "--engine",
            "http",
            "--url",
            "http://h:1",
            "--tasks",
            "20",
            "--out",
            "o",
            "--set",
            "alpha=0.2",
        ]
    )
    assert (a.stream, a.engine, a.url, a.tasks, a.out, a.overrides) == (
        "aflow",
        "http",
        "http://h:1",
        20,
        "o",
        ["alpha=0.2"],
    )
    assert a.func is cli.main
    with pytest.raises(SystemExit):
        parser().parse_args(["evochamber", "--stream", "nope", "--out", "o"])


def test_http_without_url_gives_a_clear_error():
    with pytest.raises(SystemExit, match="needs --url"):
        cli.make_llm("http", None, None, 0)


def test_main_end_to_end_with_a_scripted_bridge(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    data.mkdir()
    recs = [
        {"id": f"g{i}", "class": "math", "problem": f"[g{i}] add", "true_answer": str(i)}
        for i in range(6)
    ]
    recs_m = [
        {
            "id": f"m{i}",
            "class": "math",
            "problem": f"[m{i}] mul",
            "true_answer": str(i),
            "metadata": {"level": 5},
        }
        for i in range(6)
    ]
    (data / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (data / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs_m))
    stream = [dict(r, niche="gsm8k") for r in recs] + [dict(r, niche="math") for r in recs_m]
    monkeypatch.setattr(
        "coevo_jax.orchestrators.evochamber.streams.offline_source", lambda name: []
    )
    monkeypatch.setattr(
        cli,
        "make_llm",
        lambda engine, url, model, seed, served: ScriptedLLM(stream, {}, default=0.6),
    )
    monkeypatch.setattr(
        "coevo_jax.orchestrators.evochamber.loop.default_reward_fn", lambda: boxed_reward
    )
    out = tmp_path / "run"
    args = parser().parse_args(
        [
            "evochamber",
            "--stream",
            "aflow",
            "--data",
            str(data),
            "--tasks",
            "8",
            "--out",
            str(out),
            "--embedder",
            "hash",
            "--baselines",
            "--no-progress",
            "--set",
            "pool_size=5",
            "--set",
            "tau=4",
        ]
    )
    assert args.func(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["tasks"] == 8 and set(printed["accuracy_per_niche"]) == {"gsm8k", "math"}
    assert "single_agent_accuracy" in printed and "sc@5_accuracy" in printed
    for f in ("events.jsonl", "transcript.jsonl", "report.json", "report.md", "anchor_counts.png"):
        assert (out / f).is_file()


def test_shared_backbone_maps_every_agent_to_the_base_model():
    from coevo_jax.text_llm import TextRequest

    class Echo:
        def complete(self, reqs):
            return [str(r.agent) for r in reqs]

    assert cli.SharedBackbone(Echo()).complete(
        [TextRequest("p", agent="a17"), TextRequest("q", agent=3)]
    ) == ["-1", "-1"]


def test_no_selector_and_shuffle_ablations(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    data.mkdir()
    recs = [
        {"id": f"g{i}", "class": "math", "problem": f"[g{i}] add", "true_answer": str(i)}
        for i in range(8)
    ]
    (data / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    stream = [dict(r, niche="gsm8k") for r in recs]
    monkeypatch.setattr(
        "coevo_jax.orchestrators.evochamber.streams.offline_source", lambda name: []
    )
    monkeypatch.setattr(
        cli, "make_llm", lambda engine, url, model, seed, served: ScriptedLLM(stream, {})
    )
    monkeypatch.setattr(
        "coevo_jax.orchestrators.evochamber.loop.default_reward_fn", lambda: boxed_reward
    )
    picked = []
    import coevo_jax.orchestrators.evochamber.team as team

    real = team.random_team
    monkeypatch.setattr(
        team, "random_team", lambda state, cfg: picked.append(real(state, cfg)) or picked[-1]
    )

    def run(out, *extra):
        args = parser().parse_args(
            ["evochamber", "--stream", "aflow", "--data", str(data), "--out", str(out)]
            + ["--embedder", "hash", "--no-progress", "--set", "pool_size=6", *extra]
        )
        assert args.func(args) == 0
        printed = json.loads(capsys.readouterr().out)
        ids = [json.loads(x)["task_id"] for x in (out / "events.jsonl").read_text().splitlines()]
        return printed, [i for i in ids]

    base, order = run(tmp_path / "base")
    assert base["team_selector"] == "niche" and order == [r["id"] for r in recs] and not picked
    abl, order2 = run(tmp_path / "abl", "--no-selector", "--shuffle", "3")
    assert abl["team_selector"] == "random" and abl["shuffle"] == 3
    assert sorted(order2) == sorted(order) and order2 != order  # same tasks, permuted
    assert len(picked) == 8 and all(len(set(t)) == 3 for t in picked)
    teams = [
        json.loads(x)["team"] for x in (tmp_path / "abl" / "events.jsonl").read_text().splitlines()
    ]
    assert [tuple(t) for t in teams] == picked


def test_shared_backbone_passes_token_budgets_through_to_the_transcript():
    from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
    from coevo_jax.orchestrators.evochamber.structures import Caller, MemberContext

    class Counting:
        def complete(self, reqs):
            return ["ok" for _ in reqs]

        def count_tokens(self, prompt):
            return len(prompt.split())

        def prompt_budget(self, max_tokens):
            return 1000 - max_tokens

    llm = cli.SharedBackbone(Counting())
    assert llm.prompt_budget(10) == 990
    assert not hasattr(cli.SharedBackbone(object()), "count_tokens")
    cfg = EvoChamberConfig()
    caller = Caller(llm, {"a": MemberContext("be brief")}, cfg)
    caller.ask([("a", "two words", "solve")])
    (t,) = caller.transcript
    assert t["prompt_tokens"] == 4 and t["prompt_budget"] == 1000 - cfg.max_tokens
