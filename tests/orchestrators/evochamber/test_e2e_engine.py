"""End to end: 20 AFlow-Stream tasks on SmolLM2-135M through the in-process JAX engine."""

import json

import pytest


@pytest.mark.slow
def test_twenty_tasks_on_smollm2_in_process(tmp_path):
    pytest.importorskip(
        "rollout_bridge.local_engine", reason="needs the rollout bridge's in-process engine"
    )
    from coevo_jax.models.default import default_model_path

    try:
        default_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from coevo_jax.orchestrators.evochamber.cli import make_llm
    from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
    from coevo_jax.orchestrators.evochamber.embed import make_embedder
    from coevo_jax.orchestrators.evochamber.loop import (
        Runtime,
        default_reward_fn,
        load_events,
        run_stream,
    )
    from coevo_jax.orchestrators.evochamber.report import write_report
    from coevo_jax.orchestrators.evochamber.state import replay
    from coevo_jax.orchestrators.evochamber.streams import build_stream

    records = build_stream("aflow", None, limit=20)
    cfg = EvoChamberConfig(
        pool_size=6,
        tau=5,
        max_tokens=32,
        short_max_tokens=16,
        debate_rounds=1,
        leadlearn_note=False,
    )
    rt = Runtime(
        make_llm("inprocess", None, None, cfg.seed),
        default_reward_fn(),  # the EvoChamber paper's metrics: exact match, pass@1 on all tests
        make_embedder("auto", cfg.embed_dim),
        cfg,
    )
    res = run_stream(records, rt, out_dir=tmp_path, progress=False)
    s = write_report(res.events, cfg, tmp_path, counters=res.state.counters)
    assert s["tasks"] == 20 and set(s["accuracy_per_niche"]) == {
        "gsm8k",
        "mbpp",
        "math",
        "humaneval",
    }
    assert (tmp_path / "anchor_counts.png").stat().st_size > 0
    assert json.loads((tmp_path / "report.json").read_text())["llm_calls"] > 20 * 5
    assert replay(load_events(tmp_path / "events.jsonl"), cfg) == res.state
    assert s["metric_per_niche"] == {
        "gsm8k": "exact_match",
        "math": "exact_match",
        "mbpp": "pass@1",
        "humaneval": "pass@1",
    }
    # every prompt was checked against SmolLM2's context (8192 tokens minus max_tokens) and
    # sent whole; the LeadLearn prompt showed up to bank_top_k retrieved bank entries
    calls = [
        c
        for line in (tmp_path / "transcript.jsonl").read_text().splitlines()
        for c in json.loads(line)["calls"]
    ]
    assert calls and all(c["prompt_tokens"] <= c["prompt_budget"] for c in calls)
    lead = [c for c in calls if c["tag"] == "leadlearn"]
    shown = [e["leadlearn_entries"] for e in res.events if e["type"] == "task"]
    assert shown[0] == 0 and all(0 <= n <= cfg.bank_top_k for n in shown) and max(shown) > 0
    print(
        f"prompts within budget: max {max(c['prompt_tokens'] for c in calls)} tokens "
        f"(budget {min(c['prompt_budget'] for c in calls)}); LeadLearn prompt max "
        f"{max(c['prompt_tokens'] for c in lead)} tokens, bank entries shown per task: {shown}; "
        f"accuracy {s['accuracy']:.3f} (solved {s['solved_rate']:.3f}), partial credit "
        f"{s['partial_credit']:.3f}; CoDream sessions {s['codream_sessions']}, skipped "
        f"{s['codream_skipped_no_success']}"
    )
