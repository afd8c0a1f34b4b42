"""Lifecycle operators: the roster as a variable (the EvoChamber paper, population level).

Every ``cfg.tau`` tasks :func:`plan_lifecycle` inspects the pool and returns the operator
events to apply, in this order (each planned on the state left by the previous ones):

- prune: an agent with a full window of ``cfg.prune_window`` own scores whose mean lags the
  pool mean (over agents with any recent score) by more than ``cfg.prune_margin`` is retired,
  worst first, never below ``cfg.min_pool``.
- merge: two agents, each with at least ``cfg.merge_min_exposure`` tasks, with
  omega_ij >= ``cfg.merge_omega`` and max_z |q_i(z) - q_j(z)| <= ``cfg.merge_q_diff`` are
  consolidated into the more exposed one (ties -> earlier in the roster); one merge per agent
  per inspection, never below ``cfg.min_pool``; agents younger than ``cfg.merge_min_age``
  tasks are exempt (a fork child is born as its parent's twin).
- fork: on each niche, an agent forks when it "dominates": it anchored at least
  ``cfg.fork_anchor_share`` of the niche's last ``cfg.fork_window`` tasks, its q there is at
  least ``cfg.fork_q_min``, and it has not forked on that niche before; never above
  ``cfg.max_pool``. The child starts with the parent's competence and archive, so the two
  share anchor duty afterwards.
- genesis: a niche that recurs (at least ``cfg.genesis_min_tasks`` tasks so far) and has no
  specialist (best q below ``cfg.genesis_q_max``, and no active agent aimed at it by genesis or
  specialize) gets a fresh agent spawned from the most generalist agent (highest mean minus
  standard deviation of q over the seen niches), persona aimed at the niche.
- specialize: an agent whose best q (over niches it has worked on) reaches
  ``cfg.specialize_q_min`` gets a persona sentence focusing it on that niche, once per niche.

Persona mutations are fixed templates (not LLM calls), so the lifecycle is deterministic
given the state. Each event carries a ``reason`` with the numbers that triggered it.
"""

from __future__ import annotations

import itertools

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.state import ChamberState, agent_name, apply_lifecycle
from coevo_jax.orchestrators.evochamber.team import competence_matrix, cosine_matrix


def fork_persona(persona: str, niche: str) -> str:
    return f"{persona} You are a specialist in {niche} problems: go deeper on their typical traps."


def genesis_persona(base: str, niche: str) -> str:
    return f"{base} You are new to the team and focus on {niche} problems."


def specialize_persona(persona: str, niche: str) -> str:
    return f"{persona} Your strongest area is {niche}; lean on what works there."


def _prune(state: ChamberState, cfg: EvoChamberConfig) -> list[dict]:
    means = {a: float(np.mean(ag.recent)) for a, ag in state.agents.items() if ag.recent}
    if not means:
        return []
    pool_mean = float(np.mean(list(means.values())))
    lagging = sorted(
        (m, a)
        for a, m in means.items()
        if len(state.agents[a].recent) >= cfg.prune_window and m < pool_mean - cfg.prune_margin
    )
    room = len(state.agents) - cfg.min_pool
    return [
        {"op": "prune", "agent": a, "reason": {"recent_mean": m, "pool_mean": pool_mean}}
        for m, a in lagging[: max(room, 0)]
    ]


def _merge(state: ChamberState, cfg: EvoChamberConfig) -> list[dict]:
    names = [
        a
        for a, ag in state.agents.items()
        if ag.exposure() >= cfg.merge_min_exposure and state.step - ag.born >= cfg.merge_min_age
    ]
    if len(names) < 2 or not state.niches:
        return []
    q = competence_matrix(state, names, state.niches, cfg)
    om = cosine_matrix(q)
    used: set[str] = set()
    out = []
    room = len(state.agents) - cfg.min_pool
    for i, j in itertools.combinations(range(len(names)), 2):
        if len(out) >= room:
            break
        a, b = names[i], names[j]
        if a in used or b in used:
            continue
        diff = float(np.max(np.abs(q[i] - q[j])))
        if om[i, j] >= cfg.merge_omega and diff <= cfg.merge_q_diff:
            keep, drop = (
                (b, a) if state.agents[b].exposure() > state.agents[a].exposure() else (a, b)
            )
            out.append(
                {
                    "op": "merge",
                    "keep": keep,
                    "drop": drop,
                    "reason": {"omega": float(om[i, j]), "max_q_diff": diff},
                }
            )
            used |= {a, b}
    return out


def _fork(state: ChamberState, cfg: EvoChamberConfig) -> list[dict]:
    out = []
    for z in state.niches:
        if len(state.agents) + len(out) >= cfg.max_pool:
            break
        recent = state.anchors.get(z, ())
        if len(recent) < cfg.fork_window:
            continue
        names, counts = np.unique(np.array(recent), return_counts=True)
        best = str(names[int(np.argmax(counts))])
        share = float(counts.max()) / len(recent)
        ag = state.agents.get(best)
        if ag is None:
            continue
        qz = ag.competence(z, cfg.q_init)
        if share >= cfg.fork_anchor_share and qz >= cfg.fork_q_min and z not in ag.forked:
            out.append(
                {
                    "op": "fork",
                    "parent": best,
                    "child": agent_name(state.next_agent + len(out)),
                    "persona": fork_persona(ag.persona, z),
                    "niche": z,
                    "reason": {"anchor_share": share, "q": qz},
                }
            )
    return out


def _genesis(state: ChamberState, cfg: EvoChamberConfig) -> list[dict]:
    if not state.niches:
        return []
    names = list(state.agents)
    q = competence_matrix(state, names, state.niches, cfg)
    generalism = q.mean(axis=1) - q.std(axis=1)
    parent = names[int(np.argmax(generalism))]
    out = []
    for k, z in enumerate(state.niches):
        if len(names) + len(out) >= cfg.max_pool:
            break
        best = float(q[:, k].max())
        aimed = any(z in state.agents[a].specialized for a in names)
        if (
            state.niche_counts.get(z, 0) >= cfg.genesis_min_tasks
            and best < cfg.genesis_q_max
            and not aimed
        ):
            out.append(
                {
                    "op": "genesis",
                    "parent": parent,
                    "child": agent_name(state.next_agent + len(out)),
                    "persona": genesis_persona(cfg.persona, z),
                    "niche": z,
                    "reason": {"best_q": best, "tasks_seen": state.niche_counts.get(z, 0)},
                }
            )
    return out


def _specialize(state: ChamberState, cfg: EvoChamberConfig) -> list[dict]:
    out = []
    for a, ag in state.agents.items():
        worked = [z for z in state.niches if ag.exposure(z) > 0]
        if not worked:
            continue
        z = max(worked, key=lambda z: (ag.competence(z, cfg.q_init), -state.niches.index(z)))
        qz = ag.competence(z, cfg.q_init)
        if qz >= cfg.specialize_q_min and z not in ag.specialized:
            out.append(
                {
                    "op": "specialize",
                    "agent": a,
                    "niche": z,
                    "persona": specialize_persona(ag.persona, z),
                    "reason": {"q": qz},
                }
            )
    return out


def plan_lifecycle(state: ChamberState, cfg: EvoChamberConfig) -> tuple[list[dict], ChamberState]:
    """The lifecycle events due now and the state after applying them.

    Events are dicts ``{"type": "lifecycle", "step", "op", ..., "reason"}`` ready for the
    event log, each already applied (with :func:`apply_lifecycle`) to the returned state.
    """
    events = []
    for planner in (_prune, _merge, _fork, _genesis, _specialize):
        for ev in planner(state, cfg):
            ev = {"type": "lifecycle", "step": state.step, **ev}
            state = apply_lifecycle(state, ev, cfg)
            events.append(ev)
    return events, state
