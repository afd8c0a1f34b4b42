import json

import pytest

from coevo_jax.orchestrators.flyroute.profiles import (
    ProfileFileError,
    ProfileStore,
    RegistrationError,
)

SEEDS = [f"seed question {i} about integrals" for i in range(5)]


def test_registration_needs_five_seed_queries():
    s = ProfileStore()
    with pytest.raises(RegistrationError, match=r"'math'.*at least 5 seed queries, got 4"):
        s.register("math", SEEDS[:4])
    with pytest.raises(RegistrationError, match="seed query 2"):
        s.register("math", SEEDS[:2] + [" "] + SEEDS[3:])
    with pytest.raises(RegistrationError, match="list of strings"):
        s.register("math", "one string")
    assert len(s) == 0 and s.revision == 0


def test_registration_names():
    s = ProfileStore()
    s.register("math", SEEDS)
    with pytest.raises(RegistrationError, match="already registered"):
        s.register("math", SEEDS)
    for bad in ("", "two words", "-x", None):
        with pytest.raises(RegistrationError, match="invalid"):
            s.register(bad, SEEDS)


def test_profile_initial_state_and_descriptions():
    s = ProfileStore()
    p = s.register("math", SEEDS, "Solves math.")
    q = s.register("code", [f"python task {i}" for i in range(6)])
    assert p.store_size == 5 and p.n_gated == 0 and all(e.is_seed for e in p.successes)
    assert p.learned_description == "" and p.active_description == "Solves math."
    assert q.active_description == "" and q.seed_description is None
    s.add_success("math", "new q", "resp", 0.8, {"query_id": "q1"})
    assert p.store_size == 6 and p.n_gated == 1
    assert p.successes[-1].provenance == {"source": "gate", "query_id": "q1"}
    s.add_learned("math", "Integrals and equations.", step=3)
    s.add_learned("math", "Calculus.", step=9)
    assert p.active_description == "Calculus."
    assert [v.text for v in p.learned] == ["Integrals and equations.", "Calculus."]  # history kept
    assert [v.version for v in p.learned] == [1, 2]
    assert s.store_sizes() == {"math": 6, "code": 6}
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        s.add_success("math", "q", "r", 1.2)
    with pytest.raises(KeyError, match="no agent named 'nope'"):
        s.add_success("nope", "q", "r", 0.9)


def _populated(store):
    store.register("math", SEEDS, "Solves math.")
    store.register("code", [f"python task {i}" for i in range(5)])
    for i in range(7):
        store.add_success(
            "math", f"q{i}", f"r{i}", 0.7 + i * 0.01, {"query_id": f"id{i}", "step": i}
        )
        if i in (2, 5):
            store.add_learned("math", f"version after {i + 1}", step=i)
    store.add_success("code", "write python", "def f(): pass", 1.0)
    store.add_learned("code", "Code stuff.")
    return store


def _snapshot(store):
    return [
        (
            p.name,
            p.seed_description,
            [(e.query, e.response, e.score, e.provenance) for e in p.successes],
            p.learned,
        )
        for p in store
    ]


def test_save_load_round_trip(tmp_path):
    s = _populated(ProfileStore())
    path = s.save(tmp_path / "p.jsonl")
    t = ProfileStore.load(path)
    assert _snapshot(t) == _snapshot(s)
    # learned versions keep the success count they were distilled at
    assert [v.n_successes for v in t["math"].learned] == [3, 6]
    # saving the reloaded store gives the same bytes
    assert t.save(tmp_path / "q.jsonl").read_text() == path.read_text()
    assert not list(tmp_path.glob("*.tmp"))


def test_journal_appends_and_resumes(tmp_path):
    j = tmp_path / "sub" / "journal.jsonl"
    s = _populated(ProfileStore(journal=j))
    n_lines = len(j.read_text().splitlines())  # flushed as it happens, before close
    assert n_lines == 1 + 2 + 8 + 3
    s.close()
    with ProfileStore(journal=j) as r:  # reopen: replays, then keeps appending
        assert _snapshot(r) == _snapshot(s)
        r.add_success("code", "more python", "x", 0.9)
    assert _snapshot(ProfileStore.load(j))[1][2][-1][0] == "more python"


def test_copy_is_independent():
    s = _populated(ProfileStore())
    c = s.copy()
    s.add_success("math", "late", "r", 0.9)
    assert c["math"].store_size == s["math"].store_size - 1


@pytest.mark.parametrize(
    "lines,match",
    [
        (["{not json"], r"p.jsonl:1: not valid JSON"),
        (
            ['{"type": "register", "name": "a", "seed_queries": []}'],
            r"p.jsonl:1: not a FlyRoute profile",
        ),
        (
            ["HEADER", '{"type": "success", "agent": "a", "query": "q"}'],
            r"p.jsonl:2: success event lacks field\(s\) response, score",
        ),
        (
            [
                "HEADER",
                '{"type": "success", "agent": "ghost", "query": "q", "response": "r", "score": 1}',
            ],
            r"p.jsonl:2: .*ghost",
        ),
        (["HEADER", '{"type": "bogus"}'], r"p.jsonl:2: unknown event type"),
    ],
)
def test_malformed_file_names_file_and_line(tmp_path, lines, match):
    header = json.dumps({"type": "header", "format": "flyroute-profiles", "version": 1})
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(header if x == "HEADER" else x for x in lines) + "\n")
    with pytest.raises(ProfileFileError, match=match):
        ProfileStore.load(p)


def test_missing_file():
    with pytest.raises(ProfileFileError, match="not found"):
        ProfileStore.load("/nonexistent/p.jsonl")
