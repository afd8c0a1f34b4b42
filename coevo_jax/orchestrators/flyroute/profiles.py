"""Agent registration, profiles and their persistence.

A profile (the FlyRoute paper, docs/design.md §8) is ``(seed description, learned description, success
store)``. The store starts with the registration's seed queries and grows with quality-gated
``(query, response, score)`` triples, each with its provenance. Learned descriptions are
versioned: every distillation appends a version, so the history is kept.

Persistence is one JSONL event log (``register`` / ``success`` / ``distill`` lines after a
header). A saved store and a live journal use the same format: :meth:`ProfileStore.save`
writes a compacted log atomically; a store opened with ``journal=`` appends and flushes each
event as it happens, so a crash loses at most the line being written. Loading replays the log
and reports a malformed line with its file and line number.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from coevo_jax._errors import UserError

FORMAT = "flyroute-profiles"
FORMAT_VERSION = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class RegistrationError(UserError, ValueError):
    """An agent registration is invalid (too few seed queries, bad or duplicate name)."""


class ProfileFileError(UserError, ValueError):
    """A profile file is malformed; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Success:
    """One entry of a success store.

    Attributes:
      query: the query text.
      response: the agent's response ("" for registration seeds, which come without one).
      score: the gate's score in [0, 1] (1.0 for seeds).
      provenance: where it came from: ``{"source": "seed"}`` or ``{"source": "gate",
        "gate": "judge" | "verifier", "query_id": ..., "step": ..., "explore": bool}``.
    """

    query: str
    response: str
    score: float
    provenance: dict[str, Any]

    @property
    def is_seed(self) -> bool:
        return self.provenance.get("source") == "seed"


@dataclasses.dataclass(frozen=True)
class LearnedVersion:
    """One distilled description.

    Attributes:
      version: 1, 2, ... in order of distillation.
      text: the learned description.
      n_successes: gated (non-seed) successes the agent had when it was distilled.
      step: the replay step it was distilled at (-1 when unknown).
    """

    version: int
    text: str
    n_successes: int
    step: int = -1


@dataclasses.dataclass
class Profile:
    """An agent's profile. Mutate it only through :class:`ProfileStore` (so it is journaled)."""

    name: str
    seed_description: str | None
    successes: list[Success] = dataclasses.field(default_factory=list)
    learned: list[LearnedVersion] = dataclasses.field(default_factory=list)

    @property
    def learned_description(self) -> str:
        """The latest learned description, "" before the first distillation."""
        return self.learned[-1].text if self.learned else ""

    @property
    def active_description(self) -> str:
        """What the router shows: the learned description once there is one, else the seed."""
        return self.learned_description or (self.seed_description or "")

    @property
    def store_size(self) -> int:
        """All entries, registration seeds included (what retrieval indexes)."""
        return len(self.successes)

    @property
    def n_gated(self) -> int:
        """``|E_a|`` of the uncertainty: successes added by the quality gate (seeds excluded)."""
        return sum(not s.is_seed for s in self.successes)

    @property
    def queries(self) -> list[str]:
        return [s.query for s in self.successes]


class ProfileStore:
    """The registered agents' profiles, in registration order.

    Args:
      min_seed_queries: a registration with fewer seed queries is an error (the FlyRoute
        paper: 5).
      journal: optional path of a JSONL event log; every mutation is appended and flushed
        to it. If the file exists it must be a profile log and is replayed first (resume).
    """

    def __init__(self, *, min_seed_queries: int = 5, journal: str | Path | None = None):
        self.min_seed_queries = min_seed_queries
        self._profiles: dict[str, Profile] = {}
        self.revision = 0  # bumped on every mutation; retrieval caches key on it
        self._journal: TextIO | None = None
        self.journal_path = Path(journal) if journal is not None else None
        if self.journal_path is not None:
            if self.journal_path.exists() and self.journal_path.stat().st_size > 0:
                _replay(self, self.journal_path)
                self._journal = open(self.journal_path, "a", encoding="utf-8")  # noqa: SIM115
            else:
                self.journal_path.parent.mkdir(parents=True, exist_ok=True)
                self._journal = open(self.journal_path, "w", encoding="utf-8")  # noqa: SIM115
                self._write(self._journal, _header())

    # ---- reading -------------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self._profiles

    def __getitem__(self, name: str) -> Profile:
        try:
            return self._profiles[name]
        except KeyError:
            raise KeyError(f"no agent named {name!r}; registered: {self.names}") from None

    def __iter__(self) -> Iterator[Profile]:
        return iter(self._profiles.values())

    def __len__(self) -> int:
        return len(self._profiles)

    @property
    def names(self) -> list[str]:
        return list(self._profiles)

    def store_sizes(self) -> dict[str, int]:
        return {p.name: p.store_size for p in self}

    # ---- mutations -----------------------------------------------------------------------
    def register(
        self,
        name: str,
        seed_queries: Sequence[str],
        description: str | None = None,
    ) -> Profile:
        """Registers an agent with a name, an optional description and its seed queries.

        Raises:
          RegistrationError: bad or duplicate name, fewer than ``min_seed_queries`` seed
            queries, or an empty seed query.
        """
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise RegistrationError(
                f"agent name {name!r} is invalid: use letters, digits, '_', '-' or '.', "
                "starting with a letter or digit (names are matched in the router's answer)"
            )
        if name in self._profiles:
            raise RegistrationError(f"agent {name!r} is already registered")
        if isinstance(seed_queries, str):
            raise RegistrationError(
                f"agent {name!r}: seed_queries must be a list of strings, not one string"
            )
        seeds = list(seed_queries)
        if len(seeds) < self.min_seed_queries:
            raise RegistrationError(
                f"agent {name!r}: registration needs at least {self.min_seed_queries} seed "
                f"queries, got {len(seeds)}"
            )
        for i, q in enumerate(seeds):
            if not isinstance(q, str) or not q.strip():
                raise RegistrationError(f"agent {name!r}: seed query {i} is empty or not a string")
        if description is not None and not isinstance(description, str):
            raise RegistrationError(f"agent {name!r}: description must be a string or None")
        self._apply(
            {"type": "register", "name": name, "description": description, "seed_queries": seeds}
        )
        return self._profiles[name]

    def add_success(
        self,
        agent: str,
        query: str,
        response: str,
        score: float,
        provenance: dict[str, Any] | None = None,
    ) -> Success:
        """Appends a gated success to ``agent``'s store."""
        self[agent]  # noqa: B018 - raises the helpful KeyError
        if not 0.0 <= float(score) <= 1.0:
            raise ValueError(f"agent {agent!r}: success score must be in [0, 1], got {score}")
        prov = {"source": "gate", **(provenance or {})}
        self._apply(
            {
                "type": "success",
                "agent": agent,
                "query": query,
                "response": response,
                "score": float(score),
                "provenance": prov,
            }
        )
        return self._profiles[agent].successes[-1]

    def add_learned(self, agent: str, text: str, *, step: int = -1) -> LearnedVersion:
        """Appends a new learned-description version for ``agent`` (older ones are kept)."""
        p = self[agent]
        self._apply(
            {
                "type": "distill",
                "agent": agent,
                "text": text,
                "version": len(p.learned) + 1,
                "n_successes": p.n_gated,
                "step": int(step),
            }
        )
        return p.learned[-1]

    # ---- persistence ---------------------------------------------------------------------
    def events(self) -> Iterator[dict[str, Any]]:
        """The compacted event log that rebuilds this store (header first)."""
        yield _header()
        for p in self:
            seeds = [s.query for s in p.successes if s.is_seed]
            yield {
                "type": "register",
                "name": p.name,
                "description": p.seed_description,
                "seed_queries": seeds,
            }
        for p in self:
            # Interleave successes and distillations in the order they happened.
            learned = list(p.learned)
            n = 0
            for s in p.successes:
                if s.is_seed:
                    continue
                while learned and learned[0].n_successes <= n:
                    yield _distill_event(p.name, learned.pop(0))
                yield {
                    "type": "success",
                    "agent": p.name,
                    "query": s.query,
                    "response": s.response,
                    "score": s.score,
                    "provenance": s.provenance,
                }
                n += 1
            for lv in learned:
                yield _distill_event(p.name, lv)

    def save(self, path: str | Path) -> Path:
        """Writes the store to ``path`` atomically (a temp file, then a rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for ev in self.events():
                    self._write(f, ev)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path, *, min_seed_queries: int = 5) -> ProfileStore:
        """Rebuilds a store from a file written by :meth:`save` or a journal."""
        path = Path(path)
        if not path.is_file():
            raise ProfileFileError(f"profile file not found: {path}")
        store = cls(min_seed_queries=min_seed_queries)
        _replay(store, path)
        return store

    def copy(self) -> ProfileStore:
        """An independent in-memory copy (no journal)."""
        new = ProfileStore(min_seed_queries=self.min_seed_queries)
        new._profiles = copy.deepcopy(self._profiles)
        new.revision = self.revision
        return new

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def __enter__(self) -> ProfileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals -----------------------------------------------------------------------
    @staticmethod
    def _write(f: TextIO, event: dict[str, Any]) -> None:
        f.write(json.dumps(event, ensure_ascii=False) + "\n")

    def _apply(self, ev: dict[str, Any], *, journal: bool = True) -> None:
        kind = ev["type"]
        if kind == "register":
            name = ev["name"]
            if name in self._profiles:
                raise RegistrationError(f"agent {name!r} is already registered")
            seeds = [Success(q, "", 1.0, {"source": "seed"}) for q in ev["seed_queries"]]
            self._profiles[name] = Profile(name, ev.get("description"), seeds)
        elif kind == "success":
            self[ev["agent"]].successes.append(
                Success(
                    ev["query"],
                    ev["response"],
                    float(ev["score"]),
                    dict(ev.get("provenance") or {}),
                )
            )
        elif kind == "distill":
            p = self[ev["agent"]]
            p.learned.append(
                LearnedVersion(
                    int(ev["version"]), ev["text"], int(ev["n_successes"]), int(ev.get("step", -1))
                )
            )
        else:
            raise ValueError(f"unknown profile event type {kind!r}")
        self.revision += 1
        if journal and self._journal is not None:
            self._write(self._journal, ev)
            self._journal.flush()


def _header() -> dict[str, Any]:
    return {"type": "header", "format": FORMAT, "version": FORMAT_VERSION}


def _distill_event(agent: str, lv: LearnedVersion) -> dict[str, Any]:
    return {
        "type": "distill",
        "agent": agent,
        "text": lv.text,
        "version": lv.version,
        "n_successes": lv.n_successes,
        "step": lv.step,
    }


_REQUIRED = {
    "register": ("name", "seed_queries"),
    "success": ("agent", "query", "response", "score"),
    "distill": ("agent", "text", "version", "n_successes"),
}


def _replay(store: ProfileStore, path: Path) -> None:
    for lineno, ev in _read_events(path):
        try:
            store._apply(ev, journal=False)
        except (KeyError, ValueError, TypeError) as e:
            raise ProfileFileError(f"{path}:{lineno}: {e}") from e


def _read_events(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """Yields (line number, event) of a profile log; a bad line raises naming file:line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            where = f"{path}:{lineno}"
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError as e:
                raise ProfileFileError(f"{where}: not valid JSON ({e.msg})") from e
            if not isinstance(ev, dict) or "type" not in ev:
                raise ProfileFileError(f"{where}: expected an object with a 'type' field")
            if lineno == 1 or ev["type"] == "header":
                if ev.get("type") != "header" or ev.get("format") != FORMAT:
                    raise ProfileFileError(f"{where}: not a FlyRoute profile file (missing header)")
                if ev.get("version") != FORMAT_VERSION:
                    raise ProfileFileError(
                        f"{where}: unsupported format version {ev.get('version')!r}"
                    )
                continue
            required = _REQUIRED.get(ev["type"])
            if required is None:
                raise ProfileFileError(f"{where}: unknown event type {ev['type']!r}")
            missing = [k for k in required if k not in ev]
            if missing:
                raise ProfileFileError(
                    f"{where}: {ev['type']} event lacks field(s) {', '.join(missing)}"
                )
            yield lineno, ev
