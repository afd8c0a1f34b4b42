"""EvoChamber's evolvable state as plain data, and the pure updates that evolve it.

The state (docs/design.md §7) is the EvoChamber paper's theta^MAS (eq. 1) minus the per-task
team: each agent's competence q_i(z), exposure n_i(z), persona and experience archive; the pair
synergy sigma_ij(z); the roster; the shared LeadLearn bank. Style overlap omega is derived on
demand (``team.py``).

Every change goes through :func:`apply_event`, a pure function of (state, event, config): the
online loop decides (LLM calls, rewards, lifecycle plans) and records its decisions as a
JSON-serialisable event; applying the event log to the initial state replays the run to an
identical state. Updates are copy-on-write: a new state shares every untouched agent and
archive tuple with the old one, so applying an event costs O(team + recipients), not O(state).

Embeddings live in the state as ``bytes`` (float32, little-endian) so the dataclasses compare
exactly with ``==``; in events they travel as base64 of the same bytes, which is lossless.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig

INSIGHT_LEVELS = ("task-local", "subdomain", "cross-domain")


# ----------------------------------------------------------------------------- vectors


def vec_to_bytes(v: np.ndarray) -> bytes:
    """[D] float array -> float32 little-endian bytes (exact for float32 input)."""
    return np.ascontiguousarray(np.asarray(v, dtype="<f4").reshape(-1)).tobytes()


def bytes_to_vec(b: bytes) -> np.ndarray:
    """Inverse of :func:`vec_to_bytes`: a read-only [D] float32 view."""
    return np.frombuffer(b, dtype="<f4")


def vec_to_b64(v: np.ndarray | bytes) -> str:
    raw = v if isinstance(v, bytes) else vec_to_bytes(v)
    return base64.b64encode(raw).decode("ascii")


def b64_to_bytes(s: str) -> bytes:
    return base64.b64decode(s.encode("ascii"))


# ----------------------------------------------------------------------------- records


@dataclasses.dataclass(frozen=True)
class Entry:
    """One experience-archive item.

    Attributes:
      text: the lesson, meta-insight or CoDream insight.
      key: the embedding (bytes) of the task it came from; retrieval is by cosine over these.
      task_id: that task's id.
      source: "reflection" or "codream:<giver>".
      level: CoDream level ("task-local" | "subdomain" | "cross-domain"); "" for reflections.
    """

    text: str
    key: bytes
    task_id: str
    source: str = "reflection"
    level: str = ""


@dataclasses.dataclass(frozen=True)
class Agent:
    """One pool member.

    Attributes:
      name: stable id ("a00", "a01", ...); never reused after retirement.
      persona: prepended to every prompt of this agent.
      parent: the agent it was forked/spawned from, or None.
      born: the task step at which it joined.
      q: niche -> competence in [0, 1]; a missing niche reads as ``cfg.q_init``.
      n: niche -> number of tasks this agent took part in.
      recent: its own last ``cfg.prune_window`` attempt scores (the prune signal).
      lessons: niche -> archive entries (subtask-level lessons and niche-scoped insights).
      meta: cross-domain meta-insights.
      forked / specialized: niches it already forked on / was specialised towards (each
        operator fires at most once per agent and niche).
    """

    name: str
    persona: str
    parent: str | None = None
    born: int = 0
    q: Mapping[str, float] = dataclasses.field(default_factory=dict)
    n: Mapping[str, int] = dataclasses.field(default_factory=dict)
    recent: tuple[float, ...] = ()
    lessons: Mapping[str, tuple[Entry, ...]] = dataclasses.field(default_factory=dict)
    meta: tuple[Entry, ...] = ()
    forked: tuple[str, ...] = ()
    specialized: tuple[str, ...] = ()

    def competence(self, niche: str, q_init: float) -> float:
        return float(self.q.get(niche, q_init))

    def exposure(self, niche: str | None = None) -> int:
        return int(sum(self.n.values())) if niche is None else int(self.n.get(niche, 0))


@dataclasses.dataclass(frozen=True)
class BankEntry:
    """One LeadLearn round: (team profile, task profile, structure, outcome, note)."""

    key: bytes
    niche: str
    team_profile: tuple[float, ...]
    task_profile: str
    structure: str
    outcome: float
    note: str
    step: int


@dataclasses.dataclass(frozen=True)
class ChamberState:
    """The whole evolvable state.

    Attributes:
      step: tasks processed so far.
      agents: active roster, name -> Agent, in insertion order (the order is part of the
        state: selection iterates it and ties are broken over it).
      retired: names of pruned/merged-away agents, in retirement order.
      sigma: (i, j, niche) with i < j -> pair synergy; missing reads as ``cfg.q_init``.
      bank: the shared LeadLearn bank, oldest first.
      niches: niches in order of first arrival (the axis of competence vectors).
      niche_counts: niche -> tasks seen.
      anchors: niche -> the anchors of its last ``cfg.fork_window`` tasks (the fork signal).
      next_agent: the number the next new agent's name gets.
      counters: named counts (parse fallbacks, CoDream sessions, lifecycle operators, ...).
    """

    step: int
    agents: Mapping[str, Agent]
    retired: tuple[str, ...] = ()
    sigma: Mapping[tuple[str, str, str], float] = dataclasses.field(default_factory=dict)
    bank: tuple[BankEntry, ...] = ()
    niches: tuple[str, ...] = ()
    niche_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    anchors: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    next_agent: int = 0
    counters: Mapping[str, int] = dataclasses.field(default_factory=dict)


def agent_name(i: int) -> str:
    return f"a{i:02d}"


def init_state(cfg: EvoChamberConfig) -> ChamberState:
    """``cfg.pool_size`` identically initialised agents, empty bank, step 0."""
    agents = {
        agent_name(i): Agent(name=agent_name(i), persona=cfg.persona) for i in range(cfg.pool_size)
    }
    return ChamberState(step=0, agents=agents, next_agent=cfg.pool_size)


# ----------------------------------------------------------------------------- update rules


def ewma(old: float, target: float, rate: float) -> float:
    """``(1 - rate) * old + rate * target`` (eqs. 2 and 6)."""
    return (1.0 - rate) * float(old) + rate * float(target)


def pair_key(i: str, j: str, niche: str) -> tuple[str, str, str]:
    """Canonical sigma key: synergy is symmetric, so the pair is stored sorted."""
    a, b = (i, j) if i < j else (j, i)
    return (a, b, niche)


def synergy(state: ChamberState, i: str, j: str, niche: str, cfg: EvoChamberConfig) -> float:
    return float(state.sigma.get(pair_key(i, j, niche), cfg.q_init))


def update_competence(agent: Agent, niche: str, reward: float, cfg: EvoChamberConfig) -> Agent:
    """Eq. 2 on one niche plus the exposure increment n_i(z) += 1."""
    q = dict(agent.q)
    q[niche] = ewma(agent.competence(niche, cfg.q_init), reward, cfg.alpha)
    n = dict(agent.n)
    n[niche] = n.get(niche, 0) + 1
    return dataclasses.replace(agent, q=q, n=n)


def update_synergy(
    sigma: Mapping[tuple[str, str, str], float],
    team: Sequence[str],
    niche: str,
    reward: float,
    cfg: EvoChamberConfig,
) -> dict[tuple[str, str, str], float]:
    """Eq. 6 for every pair of co-participants."""
    out = dict(sigma)
    for a in range(len(team)):
        for b in range(a + 1, len(team)):
            k = pair_key(team[a], team[b], niche)
            out[k] = ewma(out.get(k, cfg.q_init), reward, cfg.beta)
    return out


def add_lesson(agent: Agent, niche: str, entry: Entry) -> Agent:
    lessons = dict(agent.lessons)
    lessons[niche] = lessons.get(niche, ()) + (entry,)
    return dataclasses.replace(agent, lessons=lessons)


def add_meta(agent: Agent, entry: Entry) -> Agent:
    return dataclasses.replace(agent, meta=agent.meta + (entry,))


def _bump(counters: Mapping[str, int], incs: Mapping[str, int]) -> dict[str, int]:
    out = dict(counters)
    for k, v in incs.items():
        out[k] = out.get(k, 0) + int(v)
    return out


def apply_task(state: ChamberState, ev: Mapping[str, Any], cfg: EvoChamberConfig) -> ChamberState:
    """Applies one ``"task"`` event (see :func:`coevo_jax.orchestrators.evochamber.loop`).

    In order: niche bookkeeping (counts, the niche's recent anchors); eq. 2 and n += 1 for each member (reward = the shared team
    reward, or the member's own score when ``cfg.credit == "individual"``); the member's own
    score into its prune window; eq. 6 for each member pair; reflections into the members'
    archives; the LeadLearn bank entry; CoDream insights into their recipients' archives
    (niche bucket for task-local/subdomain insights, meta pool for cross-domain ones).
    """
    niche = ev["niche"]
    team = list(ev["team"])
    reward = float(ev["reward"])
    scores = [float(s) for s in ev["member_scores"]]
    key = b64_to_bytes(ev["task_key"])
    agents = dict(state.agents)
    missing = [m for m in team if m not in agents]
    if missing:
        raise ValueError(
            f"task event step {ev.get('step')}: team members {missing} not in the pool"
        )

    for m, s in zip(team, scores, strict=True):
        credit = reward if cfg.credit == "team" else s
        a = update_competence(agents[m], niche, credit, cfg)
        a = dataclasses.replace(a, recent=(a.recent + (s,))[-cfg.prune_window :])
        agents[m] = a
    sigma = update_synergy(state.sigma, team, niche, reward, cfg)

    for item in ev.get("reflections", ()):
        a = agents[item["agent"]]
        if item.get("lesson"):
            a = add_lesson(a, niche, Entry(item["lesson"], key, ev["task_id"]))
        if item.get("insight"):
            a = add_meta(a, Entry(item["insight"], key, ev["task_id"]))
        agents[item["agent"]] = a

    bank = state.bank
    if ev.get("bank") is not None:
        b = ev["bank"]
        bank = bank + (
            BankEntry(
                key=b64_to_bytes(b["key"]),
                niche=niche,
                team_profile=tuple(float(x) for x in b["team_profile"]),
                task_profile=b["task_profile"],
                structure=b["structure"],
                outcome=float(b["outcome"]),
                note=b["note"],
                step=state.step,
            ),
        )

    for ins in (ev.get("codream") or {}).get("insights", ()):
        entry = Entry(ins["text"], key, ev["task_id"], f"codream:{ins['giver']}", ins["level"])
        for r in ins["recipients"]:
            if r not in agents:
                continue
            agents[r] = (
                add_meta(agents[r], entry)
                if ins["level"] == "cross-domain"
                else add_lesson(agents[r], ins["niche"], entry)
            )

    niches = state.niches if niche in state.niches else state.niches + (niche,)
    counts = dict(state.niche_counts)
    counts[niche] = counts.get(niche, 0) + 1
    anchors = dict(state.anchors)
    anchors[niche] = (anchors.get(niche, ()) + (team[0],))[-cfg.fork_window :]
    return dataclasses.replace(
        state,
        anchors=anchors,
        step=state.step + 1,
        agents=agents,
        sigma=sigma,
        bank=bank,
        niches=niches,
        niche_counts=counts,
        counters=_bump(state.counters, ev.get("counters", {})),
    )


def apply_lifecycle(
    state: ChamberState, ev: Mapping[str, Any], cfg: EvoChamberConfig
) -> ChamberState:
    """Applies one ``"lifecycle"`` event: genesis | fork | merge | prune | specialize.

    Event fields per op:
      genesis: ``parent``, ``child``, ``persona``, ``niche`` -- a fresh agent (q at q_init,
        no exposure) inheriting the parent's meta-insights only, marked as aimed at ``niche``.
      fork: ``parent``, ``child``, ``persona``, ``niche`` -- a clone (competence, exposure,
        archive) with a mutated persona; the parent records the niche in ``forked``.
      merge: ``keep``, ``drop`` -- ``keep`` absorbs ``drop``: exposure-weighted q, summed n,
        concatenated archives; ``drop`` retires.
      prune: ``agent`` -- retires.
      specialize: ``agent``, ``persona``, ``niche`` -- persona replaced, roster unchanged.
    """
    op = ev["op"]
    agents = dict(state.agents)
    retired = state.retired
    next_agent = state.next_agent

    def need(name: str) -> Agent:
        if name not in agents:
            raise ValueError(
                f"lifecycle event {op} at step {ev.get('step')}: agent {name!r} is not in the pool"
            )
        return agents[name]

    if op in ("genesis", "fork"):
        parent = need(ev["parent"])
        child = ev["child"]
        if child in agents or child in retired:
            raise ValueError(f"lifecycle event {op}: agent name {child!r} already used")
        if op == "genesis":
            agents[child] = Agent(
                name=child,
                persona=ev["persona"],
                parent=parent.name,
                born=state.step,
                meta=parent.meta,
                specialized=(ev["niche"],),
            )
        else:
            agents[child] = dataclasses.replace(
                parent,
                name=child,
                persona=ev["persona"],
                parent=parent.name,
                born=state.step,
                forked=(),
                specialized=(),
            )
            agents[parent.name] = dataclasses.replace(parent, forked=parent.forked + (ev["niche"],))
        next_agent += 1
    elif op == "merge":
        keep, drop = need(ev["keep"]), need(ev["drop"])
        q, n, lessons = {}, {}, {}
        for z in set(keep.q) | set(drop.q) | set(keep.n) | set(drop.n):
            nk, nd = keep.exposure(z), drop.exposure(z)
            qk, qd = keep.competence(z, cfg.q_init), drop.competence(z, cfg.q_init)
            q[z] = (nk * qk + nd * qd) / (nk + nd) if nk + nd > 0 else 0.5 * (qk + qd)
            n[z] = nk + nd
        for z in set(keep.lessons) | set(drop.lessons):
            lessons[z] = keep.lessons.get(z, ()) + drop.lessons.get(z, ())
        agents[keep.name] = dataclasses.replace(
            keep,
            q=q,
            n=n,
            lessons=lessons,
            meta=keep.meta + drop.meta,
            recent=(keep.recent + drop.recent)[-cfg.prune_window :],
        )
        del agents[drop.name]
        retired = retired + (drop.name,)
    elif op == "prune":
        need(ev["agent"])
        del agents[ev["agent"]]
        retired = retired + (ev["agent"],)
    elif op == "specialize":
        a = need(ev["agent"])
        agents[a.name] = dataclasses.replace(
            a, persona=ev["persona"], specialized=a.specialized + (ev["niche"],)
        )
    else:
        raise ValueError(f"unknown lifecycle op {op!r} at step {ev.get('step')}")
    return dataclasses.replace(
        state,
        agents=agents,
        retired=retired,
        next_agent=next_agent,
        counters=_bump(state.counters, {f"lifecycle_{op}": 1}),
    )


def apply_event(state: ChamberState, ev: Mapping[str, Any], cfg: EvoChamberConfig) -> ChamberState:
    """Dispatches on ``ev["type"]`` ("task" | "lifecycle")."""
    kind = ev.get("type")
    if kind == "task":
        return apply_task(state, ev, cfg)
    if kind == "lifecycle":
        return apply_lifecycle(state, ev, cfg)
    raise ValueError(f"unknown event type {kind!r} (event keys: {sorted(ev)})")


def replay(
    events: Sequence[Mapping[str, Any]], cfg: EvoChamberConfig, state: ChamberState | None = None
) -> ChamberState:
    """Folds :func:`apply_event` over ``events`` from ``init_state(cfg)`` (or ``state``)."""
    state = init_state(cfg) if state is None else state
    for ev in events:
        state = apply_event(state, ev, cfg)
    return state
