import gzip
import json

import pytest

from coevo_jax.orchestrators.evochamber.streams import (
    aflow,
    build_stream,
    hard_code,
    hard_math,
    limit_blocks,
    read_source,
)


def math_rec(i, level):
    return {
        "id": f"math-{i}",
        "class": "math",
        "problem": f"p{i}",
        "true_answer": "1",
        "metadata": {"level": level},
    }


def test_hard_math_filters_levels_and_orders_aime_years():
    math = [math_rec(i, lv) for i, lv in enumerate([1, 4, 5, 3, 5, 4])]
    aime = [
        {"id": f"aime_2024_{i}", "class": "math", "problem": "a", "true_answer": "2"}
        for i in range(3)
    ]
    aime += [
        {
            "id": f"x{i}",
            "class": "math",
            "problem": "b",
            "true_answer": "3",
            "metadata": {"year": 2022},
        }
        for i in range(2)
    ]
    s = hard_math(math, aime, n_math=3, seed=0)
    assert [r["niche"] for r in s] == ["math_hard"] * 3 + ["aime_2022"] * 2 + ["aime_2024"] * 3
    assert all(r["metadata"]["level"] in (4, 5) for r in s[:3])
    assert hard_math(math, n_math=3, seed=0) == hard_math(
        list(reversed(math)), n_math=3, seed=0
    )  # deterministic
    assert hard_math([{**math_rec(9, "Level 5")}], n_math=None)[0]["niche"] == "math_hard"


def test_hard_code_and_aflow_block_order():
    mbpp = [{"id": f"m{i}", "class": "code", "problem": "p"} for i in range(5)]
    cc = [{"id": f"c{i}", "class": "code", "problem": "p"} for i in range(2)]
    assert [r["niche"] for r in hard_code(mbpp, cc, n_mbpp=3)] == ["mbpp"] * 3 + [
        "codecontests"
    ] * 2
    src = {
        "humaneval": mbpp[:2],
        "gsm8k": [{"id": "g", "class": "math", "problem": "p"}],
        "math": [math_rec(0, 5)],
        "mbpp": cc,
    }
    assert [r["niche"] for r in aflow(src, block=2)] == [
        "gsm8k",
        "mbpp",
        "mbpp",
        "math",
        "humaneval",
        "humaneval",
    ]


def test_limit_blocks_keeps_every_niche():
    stream = [
        {"id": str(i), "niche": z} for z, n in (("a", 50), ("b", 30), ("c", 20)) for i in range(n)
    ]
    out = limit_blocks(stream, 10)
    assert len(out) == 10 and [r["niche"] for r in out] == ["a"] * 5 + ["b"] * 3 + ["c"] * 2
    out = limit_blocks(stream, 2)
    assert len(out) == 2
    assert limit_blocks(stream, None) == stream


def test_build_from_the_offline_builders():
    s = build_stream("aflow", None, limit=8)
    assert [r["niche"] for r in s] == ["gsm8k"] * 2 + ["mbpp"] * 2 + ["math"] * 2 + [
        "humaneval"
    ] * 2
    assert s[2]["class"] == "code" and s[2]["fn_name"] and s[0]["true_answer"]
    hm = build_stream("hard_math", None, limit=5)
    assert all(r["metadata"]["level"] in (4, 5) and r["niche"] == "math_hard" for r in hm)


def test_read_and_build_from_a_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(
        "coevo_jax.orchestrators.evochamber.streams.offline_source", lambda name: []
    )
    (tmp_path / "gsm8k.jsonl").write_text(
        "\n".join(
            json.dumps({"id": f"g{i}", "class": "math", "problem": "p", "true_answer": "1"})
            for i in range(4)
        )
        + "\n"
    )
    with gzip.open(tmp_path / "mbpp.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "m0", "class": "code", "problem": "p"}) + "\n")
    s = build_stream("aflow", tmp_path, limit=3)
    assert [r["niche"] for r in s] == ["gsm8k", "gsm8k", "mbpp"]
    assert read_source(tmp_path, "drop") == []
    (tmp_path / "math.jsonl").write_text('{"id": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"math.jsonl:2"):
        read_source(tmp_path, "math")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no source records"):
        build_stream("hard_code", tmp_path / "empty")
    # a mistyped directory is an error, not a silent fall-back to the offline builders
    with pytest.raises(FileNotFoundError, match=r"data directory not found: .*nowhere"):
        build_stream("hard_code", tmp_path / "nowhere")
    with pytest.raises(NotADirectoryError, match=r"gsm8k\.jsonl: not a directory"):
        build_stream("aflow", tmp_path / "gsm8k.jsonl")
    with pytest.raises(ValueError, match="unknown stream"):
        build_stream("easy", tmp_path)
