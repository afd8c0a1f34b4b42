"""Lexical retrieval over the agents' success stores (Okapi BM25 through ``bm25s``).

One BM25 index covers every agent's stored queries, so document frequencies (IDF) are shared
and raw scores are comparable across agents. Two things are read off it per query:

- ``R(q, a)``, the normalised relevance used by exploration (docs/design.md §8; our reading:
  the FlyRoute paper only says "the retriever's normalized relevance score for agent a"): the
  agent's raw score is the best BM25 score among its stored queries,
  ``s_a = max_j BM25(q, q_j)``, and
  ``R(q, a) = s_a / max_b s_b`` (so the best-matching agent has 1, an agent sharing no term
  with ``q`` has 0; all zeros when nothing matches).
- the top-k stored queries of each agent for the router's few-shot prompt (ties keep store
  order).

The index is rebuilt lazily when the store's revision changes; each stored query is
tokenised once (stores only grow).
"""

from __future__ import annotations

import dataclasses

import bm25s
import numpy as np

from coevo_jax.orchestrators.flyroute.profiles import ProfileStore


def tokenize(texts: list[str]) -> list[list[str]]:
    """bm25s's tokeniser: lowercase word tokens of 2+ characters, English stopwords removed."""
    if not texts:
        return []
    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


@dataclasses.dataclass(frozen=True)
class QueryScores:
    """BM25 scores of one query against every stored query.

    Attributes:
      doc_scores: agent name -> float array ``[|E_a|]``, the BM25 score of each stored query.
    """

    doc_scores: dict[str, np.ndarray]

    @property
    def raw(self) -> dict[str, float]:
        """``s_a``: the best BM25 score among the agent's stored queries."""
        return {a: float(s.max()) if s.size else 0.0 for a, s in self.doc_scores.items()}

    @property
    def relevance(self) -> dict[str, float]:
        """``R(q, a) = s_a / max_b s_b`` in [0, 1]; all zeros when no agent matches."""
        raw = self.raw
        top = max(raw.values(), default=0.0)
        if top <= 0.0:
            return {a: 0.0 for a in raw}
        return {a: v / top for a, v in raw.items()}

    def top_indices(self, agent: str, k: int) -> list[int]:
        """Indices into the agent's store of its ``k`` best-matching entries, best first."""
        s = self.doc_scores[agent]
        order = np.argsort(-s, kind="stable")
        return [int(i) for i in order[:k]]


class ProfileRetriever:
    """BM25 (``bm25s``, Lucene variant, k1=1.5, b=0.75) over a :class:`ProfileStore`."""

    def __init__(self, store: ProfileStore, *, k1: float = 1.5, b: float = 0.75):
        self.store = store
        self.k1, self.b = k1, b
        self._tokens: dict[str, list[list[str]]] = {}
        self._rev = -1
        self._bm25: bm25s.BM25 | None = None
        self._spans: dict[str, tuple[int, int]] = {}

    def _refresh(self) -> None:
        if self._rev == self.store.revision:
            return
        corpus: list[list[str]] = []
        self._spans = {}
        for p in self.store:
            toks = self._tokens.setdefault(p.name, [])
            if len(toks) < p.store_size:
                toks.extend(tokenize(p.queries[len(toks) :]))
            self._spans[p.name] = (len(corpus), len(corpus) + len(toks))
            corpus.extend(toks)
        self._bm25 = None
        if corpus:
            self._bm25 = bm25s.BM25(k1=self.k1, b=self.b)
            self._bm25.index(corpus, show_progress=False)
        self._rev = self.store.revision

    def score(self, query: str) -> QueryScores:
        """BM25 scores of ``query`` against every agent's stored queries."""
        self._refresh()
        q = tokenize([query])[0] if query.strip() else []
        n = max((e for _, e in self._spans.values()), default=0)
        if self._bm25 is None or not q:
            all_scores = np.zeros(n, np.float32)
        else:
            all_scores = np.asarray(self._bm25.get_scores(q), np.float32)
        return QueryScores({a: all_scores[s:e] for a, (s, e) in self._spans.items()})
