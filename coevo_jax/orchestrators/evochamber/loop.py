"""The EvoChamber online loop: one task at a time, every decision recorded as an event.

Per task (the EvoChamber paper's loop): embed the task; select (anchor, complement, scout) (eqs. 3-5);
the anchor chooses a structure with LeadLearn; the team runs it with retrieved experience in
its prompts; the final answer is scored (team reward r_t, the paper metric: pass@1 on all
tests for code, exact match for math, token F1 for QA; see
:mod:`coevo_jax.orchestrators.scoring`) and so is each member's own attempt;
members reflect; the anchor writes the bank note; CoDream runs if the team failed or
disagreed. All of that becomes one ``"task"`` event, applied with
:func:`state.apply_event`. Every ``cfg.tau`` tasks the lifecycle's events follow.

The event log is JSON lines, written and flushed as each event happens (a crash loses at
most the task in flight); ``replay(load_events(path), cfg)`` rebuilds the identical state.
A transcript of every LLM call goes to a separate file: it is for reading, not replaying.

The reward function is injectable, ``reward_fn(record, completion) -> Outcome | float in
[0, 1]``; the default is :func:`coevo_jax.orchestrators.scoring.task_outcome`. The event keeps
the metric's value (``reward``, ``member_scores``), whether the task is solved, the partial
credit of the training reward (``partial``, ``member_partial``) and the members' outcome keys
(``answer_keys``: per-test results for code, final answers otherwise), which decide
disagreement.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coevo_jax._config import to_dict
from coevo_jax.orchestrators.evochamber import archive, codream, leadlearn
from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.embed import Embedder
from coevo_jax.orchestrators.evochamber.lifecycle import plan_lifecycle
from coevo_jax.orchestrators.evochamber.prompts import answer_key
from coevo_jax.orchestrators.evochamber.state import (
    ChamberState,
    apply_event,
    init_state,
    vec_to_b64,
)
from coevo_jax.orchestrators.evochamber.structures import Caller, MemberContext, run_structure
from coevo_jax.orchestrators.evochamber.team import select_team
from coevo_jax.orchestrators.scoring import Outcome, as_outcome, task_outcome
from coevo_jax.text_llm import TextLLM

RewardFn = Callable[[Mapping[str, Any], str], "Outcome | float"]
REQUIRED_KEYS = ("id", "problem", "niche")


def default_reward_fn() -> RewardFn:
    """:func:`coevo_jax.orchestrators.scoring.task_outcome` (the EvoChamber paper's metrics)."""
    return task_outcome


def outcome_key(record: Mapping[str, Any], text: str | None, outcome: Outcome) -> str | None:
    """What a member's attempt is compared on for disagreement, as a string (None: no
    attempt or nothing extractable): the outcome's key (``"tests:110"`` for per-test code
    results); for a custom float reward, the score for code and the final answer otherwise."""
    if text is None:
        return None
    key = outcome.key
    if isinstance(key, tuple):
        return "tests:" + "".join("1" if v else "0" for v in key)
    if key is not None:
        return str(key)
    if outcome.metric != "reward":
        return None
    if record.get("class") == "code":
        return f"score:{outcome.score:g}"
    return answer_key(record, text)


def validate_record(record: Mapping[str, Any], index: int) -> None:
    missing = [k for k in REQUIRED_KEYS if k not in record or record[k] in (None, "")]
    if missing:
        rid = record.get("id", f"#{index}") if isinstance(record, Mapping) else f"#{index}"
        raise ValueError(f"stream record {rid} (position {index}): missing field(s) {missing}")


@dataclasses.dataclass
class Runtime:
    """The non-state ingredients of a run."""

    llm: TextLLM
    reward_fn: RewardFn
    embedder: Embedder
    cfg: EvoChamberConfig
    _niche_vecs: dict = dataclasses.field(default_factory=dict)

    def niche_vec(self, niche: str) -> np.ndarray:
        if niche not in self._niche_vecs:
            self._niche_vecs[niche] = self.embedder.embed(
                [f"task niche: {niche.replace('_', ' ')}"]
            )[0]
        return self._niche_vecs[niche]

    def score(self, record: Mapping[str, Any], text: str) -> Outcome:
        """The outcome of ``text`` on ``record`` (a float reward is wrapped; out of [0, 1] is
        an error naming the record)."""
        return as_outcome(self.reward_fn(record, text), record)


def run_task(
    state: ChamberState, record: Mapping[str, Any], rt: Runtime
) -> tuple[dict, list[dict]]:
    """Solves one task. Returns (the task event, the transcript of LLM calls). Pure in the
    state: nothing is mutated; apply the event to advance."""
    cfg = rt.cfg
    niche = str(record["niche"])
    counters: dict[str, int] = {}

    def bump(name: str, k: int = 1) -> None:
        counters[name] = counters.get(name, 0) + k

    t0 = time.perf_counter()
    key = rt.embedder.embed([str(record["problem"])])[0]
    team = select_team(state, niche, cfg)
    contexts = {}
    for m in team:
        lessons, metas = archive.retrieve(state.agents[m], niche, key, cfg.archive_top_k)
        contexts[m] = MemberContext(state.agents[m].persona, tuple(lessons), tuple(metas))
    caller = Caller(
        rt.llm, contexts, cfg, seed_base=(cfg.seed * 1_000_003 + state.step * 10_007) % (2**31)
    )

    # LeadLearn: choose the structure.
    profile = tuple(state.agents[m].competence(niche, cfg.q_init) for m in team)
    xi = leadlearn.query_vector(rt.niche_vec(niche), profile, cfg)
    entries = leadlearn.retrieve(state.bank, xi, cfg.bank_top_k)
    reply = caller.ask(
        [
            (
                team[0],
                leadlearn.choice_prompt(
                    niche, profile, entries, cfg.structures, str(record["problem"])
                ),
                "leadlearn",
            )
        ],
        short=True,
        with_context=False,
    )[0]
    structure = leadlearn.parse_structure(reply, cfg.structures)
    if structure is None:
        structure = leadlearn.evidence_choice(entries, cfg)
        bump("structure_fallback")
    result = run_structure(structure, caller, team, record)
    for k, v in result.counters.items():
        bump(k, v)

    final = rt.score(record, result.final)
    reward = final.score
    cache = {result.final: final}
    outcomes = []
    for m in team:
        att = result.attempts.get(m)
        if att is None:  # a decompose helper wrote no full solution: the team's outcome
            outcomes.append(final)
        else:
            if att not in cache:
                cache[att] = rt.score(record, att)
            outcomes.append(cache[att])
    scores = [o.score for o in outcomes]
    keys = [
        outcome_key(record, result.attempts.get(m), o) for m, o in zip(team, outcomes, strict=True)
    ]

    # Reflection into each member's archive, and the leader's bank note.
    outs = caller.ask(
        [
            (
                m,
                archive.reflection_prompt(record, result.attempts.get(m), result.final, reward),
                "reflect",
            )
            for m in team
        ],
        short=True,
        with_context=False,
    )
    reflections = []
    for m, o in zip(team, outs, strict=False):
        lesson, insight, fb = archive.parse_reflection(o)
        if fb:
            bump(fb)
        reflections.append({"agent": m, "lesson": lesson, "insight": insight})
    note = ""
    if cfg.leadlearn_note:
        o = caller.ask(
            [
                (
                    team[0],
                    leadlearn.note_prompt(structure, str(record["problem"]), result.final, reward),
                    "leadlearn_note",
                )
            ],
            short=True,
            with_context=False,
        )[0]
        note = leadlearn.parse_note(o) or ""
        if not note:
            bump("note_empty")

    event: dict[str, Any] = {
        "type": "task",
        "step": state.step,
        "task_id": str(record["id"]),
        "niche": niche,
        "team": list(team),
        "structure": structure,
        "leadlearn_entries": len(entries),
        "reward": reward,
        "metric": final.metric,
        "solved": final.solved,
        "partial": final.partial,
        "member_scores": scores,
        "member_partial": [o.partial for o in outcomes],
        "answer_keys": keys,
        "task_key": vec_to_b64(key),
        "reflections": reflections,
        "bank": {
            "key": vec_to_b64(xi),
            "team_profile": list(profile),
            "task_profile": f"{niche} / {record.get('class', 'unknown')}",
            "structure": structure,
            "outcome": reward,
            "note": note,
        },
        "codream": None,
        "counters": counters,
    }

    reason = codream.should_fire(scores, keys, cfg)
    if reason is not None:
        known = tuple(dict.fromkeys((*state.niches, niche)))
        insights, cc = codream.run_codream(
            caller,
            team,
            record,
            niche,
            result.attempts,
            scores,
            known,
            success_threshold=cfg.success_threshold,
        )
        for k, v in cc.items():
            bump(k, v)
        if cc.get("codream_skipped_no_success"):
            event["codream"] = {"reason": reason, "skipped": "no_success", "insights": []}
        else:
            bump("codream_sessions")
            # The median is taken after this task's competence update (the
            # EvoChamber paper: (iv) then CoDream).
            after = apply_event(state, event, cfg)
            for ins in insights:
                ins["recipients"] = codream.recipients(after, ins["niche"], cfg, ins["giver"])
                bump("codream_insights")
                bump("codream_writes", len(ins["recipients"]))
            event["codream"] = {"reason": reason, "insights": insights}
    event["calls"] = caller.calls
    event["seconds"] = round(time.perf_counter() - t0, 4)
    return event, caller.transcript


@dataclasses.dataclass
class RunResult:
    state: ChamberState
    events: list[dict]


class _Log:
    """Appends JSON lines and flushes each one (nothing lost on a crash)."""

    def __init__(self, path: Path | None):
        self._f = open(path, "w") if path is not None else None

    def write(self, obj: Any) -> None:
        if self._f is not None:
            self._f.write(json.dumps(obj) + "\n")
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def run_stream(
    records: Iterable[Mapping[str, Any]],
    rt: Runtime,
    *,
    out_dir: str | Path | None = None,
    state: ChamberState | None = None,
    progress: bool = True,
    total: int | None = None,
) -> RunResult:
    """Runs EvoChamber over ``records`` (dicts with at least id, problem, niche, plus what
    the reward function reads). Writes ``events.jsonl``, ``transcript.jsonl`` and
    ``config.json`` into ``out_dir`` when given."""
    from tqdm.auto import tqdm

    cfg = rt.cfg
    state = init_state(cfg) if state is None else state
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)

        (out / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
    events_log = _Log(out / "events.jsonl" if out else None)
    trans_log = _Log(out / "transcript.jsonl" if out else None)
    events: list[dict] = []
    total = (
        total if total is not None else (len(records) if isinstance(records, Sequence) else None)
    )
    bar = tqdm(total=total, desc="evochamber", unit="task", disable=not progress)
    solved = 0
    try:
        for i, rec in enumerate(records):
            validate_record(rec, i)
            ev, transcript = run_task(state, rec, rt)
            state = apply_event(state, ev, cfg)
            events.append(ev)
            events_log.write(ev)
            trans_log.write({"step": ev["step"], "task_id": ev["task_id"], "calls": transcript})
            solved += bool(ev["solved"])
            if state.step % cfg.tau == 0:
                lc, state = plan_lifecycle(state, cfg)
                for e in lc:
                    events.append(e)
                    events_log.write(e)
            bar.update(1)
            bar.set_postfix(acc=f"{solved / (i + 1):.3f}", pool=len(state.agents), refresh=False)
    finally:
        bar.close()
        events_log.close()
        trans_log.close()
    return RunResult(state, events)


def load_events(path: str | Path) -> list[dict]:
    """Reads an ``events.jsonl``; a malformed line is an error naming the file and line."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON event ({e})") from e
    return out
