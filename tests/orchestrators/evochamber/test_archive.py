import numpy as np

from coevo_jax.orchestrators.evochamber.archive import (
    parse_reflection,
    reflection_prompt,
    retrieve,
    top_k,
)
from coevo_jax.orchestrators.evochamber.state import Agent, Entry, vec_to_bytes


def e(text, vec):
    v = np.asarray(vec, np.float32)
    return Entry(text, vec_to_bytes(v / np.linalg.norm(v)), text)


def test_top_k_cosine_over_task_embeddings():
    entries = [e("far", [0, 1]), e("near", [1, 0.1]), e("exact", [1, 0]), e("mid", [1, 1])]
    got = top_k(entries, np.array([1.0, 0.0], np.float32), 2)
    assert [x.text for x in got] == ["exact", "near"]
    assert top_k(entries, np.array([1.0, 0.0], np.float32), 0) == []


def test_retrieve_uses_niche_bucket_and_meta_pool():
    a = Agent(
        "a00",
        "p",
        lessons={"x": (e("lx", [1, 0]),), "y": (e("ly", [1, 0]),)},
        meta=(e("m1", [0, 1]), e("m2", [1, 0])),
    )
    lessons, metas = retrieve(a, "x", np.array([1.0, 0.0], np.float32), 1)
    assert lessons == ["lx"] and metas == ["m2"]
    assert retrieve(a, "z", np.array([1.0, 0.0], np.float32), 3)[0] == []


def test_parse_reflection_labels_and_fallbacks():
    assert parse_reflection("LESSON: check units.\nINSIGHT: verify before answering.") == (
        "check units.",
        "verify before answering.",
        None,
    )
    assert parse_reflection("lesson:   a\n  b\nMeta-insight: c") == ("a b", "c", None)
    assert parse_reflection("Just check units.\nMore text") == (
        "Just check units.",
        None,
        "reflection_unlabeled",
    )
    assert parse_reflection("Preamble words INSIGHT: general") == (
        "Preamble words",
        "general",
        "reflection_unlabeled",
    )
    assert parse_reflection("INSIGHT: only this") == (None, "only this", "reflection_unlabeled")
    assert parse_reflection("   ") == (None, None, "reflection_empty")


def test_reflection_prompt_mentions_reward_and_format():
    p = reflection_prompt({"problem": "P?"}, "my try", "team answer", 0.0)
    assert "P?" in p and "incorrect" in p and "LESSON:" in p and "INSIGHT:" in p
