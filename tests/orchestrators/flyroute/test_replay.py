import json

import pytest

from coevo_jax.orchestrators.flyroute.bench_data import build_benchmark
from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.exploit import Router
from coevo_jax.orchestrators.flyroute.pipeline import FlyRoute
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.replay import evaluate, replay, seed_only_router
from coevo_jax.orchestrators.flyroute.report import accuracy_table, write_report

from .flyroute_fakes import ScriptedLLM, make_records


@pytest.fixture
def bench():
    return build_benchmark(make_records(16), k=5, test_fraction=0.3)


def test_evaluate_scores_against_gold_per_domain(bench):
    store = bench.register(ProfileStore())
    perfect = evaluate(
        Router(ScriptedLLM(), FlyRouteConfig()), store, bench.test, batch_size=3, progress=False
    )
    assert perfect.accuracy == 1.0 and perfect.n == len(bench.test)
    assert perfect.per_domain == {"code": 1.0, "if": 1.0, "math": 1.0, "reasoning": 1.0}
    assert perfect.bm25_accuracy == 1.0  # topic keywords are shared with the seeds
    always = evaluate(
        Router(ScriptedLLM(router="math"), FlyRouteConfig()), store, bench.test, progress=False
    )
    assert always.per_domain == {"code": 0.0, "if": 0.0, "math": 1.0, "reasoning": 0.0}
    n_math = sum(it.domain == "math" for it in bench.test)
    assert always.accuracy == pytest.approx(n_math / len(bench.test))
    none = evaluate(
        seed_only_router(ScriptedLLM(router="?"), FlyRouteConfig()),
        store,
        bench.test,
        progress=False,
    )
    assert none.accuracy == 0.0 and none.unparsed == len(bench.test)
    assert set(none.predictions.values()) == {None}


def test_replay_checkpoints_results_and_report(tmp_path, bench):
    store = bench.register(ProfileStore(journal=tmp_path / "journal.jsonl"))
    llm = ScriptedLLM()
    fr = FlyRoute.from_llm(store, llm, FlyRouteConfig(distill_every=3))
    n = len(bench.train)
    results = replay(
        fr,
        bench.train,
        bench.test,
        checkpoints=[0, 5, n, n + 100],
        out_dir=tmp_path,
        baselines={"seed-only": seed_only_router(llm, fr.config)},
        progress=False,
        manifest=bench.manifest,
    )
    assert [c["step"] for c in results["checkpoints"]] == [0, 5, n]
    assert all(c["accuracy"] == 1.0 for c in results["checkpoints"])
    assert results["baselines"]["seed-only"]["accuracy"] == 1.0
    assert results["train_online"]["accuracy"][-1] == 1.0
    growth = results["growth"]
    assert growth["step"] == list(range(n + 1))
    for c in results["checkpoints"]:
        # the saved checkpoint is the store as it was at that step
        saved = ProfileStore.load(tmp_path / c["profiles"])
        assert saved.store_sizes() == c["store_sizes"]
        assert {a: growth["sizes"][a][c["step"]] for a in saved.names} == c["store_sizes"]
    assert sum(store.store_sizes().values()) == 20 + n  # every training query stored once
    assert json.loads((tmp_path / "results.json").read_text())["checkpoints"][-1]["step"] == n
    assert ProfileStore.load(tmp_path / "journal.jsonl").store_sizes() == store.store_sizes()
    paths = write_report(tmp_path / "results.json")
    for k in ("accuracy", "growth"):
        assert paths[k].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["report"].read_text()
    assert "| FlyRoute (cold) | 0 | 100.0 |" in md and "| seed-only | - | 100.0 |" in md
    assert accuracy_table(results).count("\n") == 1 + 1 + 3
    head = accuracy_table(results).splitlines()[0].strip("| ").split(" | ")
    # every column names its metric
    assert head[:3] == ["router", "replayed queries", "routing acc. % (overall)"]
    assert head[-3:] == [
        "unparsed replies (count)",
        "retrieved queries in prompt (mean/call)",
        "router prompt tokens (max / budget)",
    ]
    # the checkpoints say how many retrieved queries the router saw; the seed-only baseline none
    assert results["checkpoints"][-1]["included_mean"] > 0
    assert results["baselines"]["seed-only"]["included_mean"] == 0
