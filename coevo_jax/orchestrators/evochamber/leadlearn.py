"""LeadLearn: the anchor learns online which collaboration structure to use.

The shared bank holds (team profile, task profile, structure, outcome, note) tuples. At
decision time the leader forms the query vector

    xi_t = normalize([ e(niche label) ; profile_weight * (q_a(z), q_c(z), q_s(z)) ])

(our reading of "from the niche label and team competence profile": ``e`` is the run's
embedder on the label, so related niche names land near each other), retrieves the top-k bank
entries by cosine similarity, and is prompted with them to name a structure.

Parsing the leader's answer (documented fallback, never an error): the text after the last
``STRUCTURE:`` label if there is one, else the whole reply, is searched for structure names
and common aliases; the last one mentioned wins. When none is found (or it is not among the
allowed structures), the choice falls back to the structure with the best mean outcome among
the retrieved entries, untried ones counting as ``cfg.q_init`` (ties ->
``cfg.fallback_structure``), and ``structure_fallback`` is counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.embed import l2_normalize
from coevo_jax.orchestrators.evochamber.state import BankEntry, bytes_to_vec

ALIASES = {
    "voting": ("voting", "vote", "majority vote", "majority voting", "majority"),
    "debate": ("debate", "debating"),
    "generator-critic": (
        "generator-critic",
        "generator critic",
        "generator_critic",
        "gen-critic",
        "critic",
    ),
    "decompose": ("decompose", "decomposition", "decomposing", "split-solve-combine"),
}
STRUCTURE_HELP = {
    "voting": "every member solves independently; the majority answer wins",
    "debate": "members solve, then revise after reading each other's solutions",
    "generator-critic": "the leader drafts, the others critique, the leader revises",
    "decompose": "the leader splits the problem, members solve parts, the leader combines",
}
_ALIAS_RE = re.compile(
    r"(?<![a-z])("
    + "|".join(sorted({re.escape(a) for v in ALIASES.values() for a in v}, key=len, reverse=True))
    + r")(?![a-z])"
)
_LABEL = re.compile(r"structure\s*[:=]", re.I)


def query_vector(
    niche_vec: np.ndarray, team_profile: Sequence[float], cfg: EvoChamberConfig
) -> np.ndarray:
    """xi_t: [D + 3] float32 unit vector (see the module docstring)."""
    v = np.concatenate(
        [
            np.asarray(niche_vec, np.float32).reshape(-1),
            cfg.profile_weight * np.asarray(team_profile, np.float32),
        ]
    )
    return l2_normalize(v)


def retrieve(bank: Sequence[BankEntry], xi: np.ndarray, k: int) -> list[BankEntry]:
    """Top-``k`` entries by cosine(xi, entry.key); ties -> the older entry first.
    Entries whose key has another dimension (a different embedder) are skipped."""
    cand = [e for e in bank if len(e.key) == 4 * xi.shape[-1]]
    if not cand:
        return []
    keys = np.stack([bytes_to_vec(e.key) for e in cand])
    sims = keys @ np.asarray(xi, np.float32)
    order = np.argsort(-sims, kind="stable")[:k]
    return [cand[i] for i in order]


def choice_prompt(
    niche: str,
    team_profile: Sequence[float],
    entries: Sequence[BankEntry],
    allowed: Sequence[str],
    problem: str,
) -> str:
    lines = [
        "You lead a team of three (you, a complement, a scout). Choose how the team collaborates "
        "on the task below.",
        "Structures:",
        *[f"- {s}: {STRUCTURE_HELP[s]}" for s in allowed],
        f"Task niche: {niche}. Team competence on it: "
        + ", ".join(f"{x:.2f}" for x in team_profile)
        + " (leader, complement, scout).",
    ]
    if entries:
        lines.append("Past leadership rounds on similar tasks:")
        for e in entries:
            lines.append(
                f"- niche {e.niche}, team ({', '.join(f'{x:.2f}' for x in e.team_profile)}): "
                f"{e.structure} -> reward {e.outcome:.2f}. {e.note}"
            )
    lines.append(f"Task:\n{problem.strip()[:800]}")
    lines.append("Reply with one line: STRUCTURE: <" + " | ".join(allowed) + ">")
    return "\n".join(lines)


def parse_structure(text: str, allowed: Sequence[str]) -> str | None:
    """The structure named in ``text`` (see the module docstring), or None."""
    if not text:
        return None
    low = text.lower()
    labels = list(_LABEL.finditer(low))
    region = low[labels[-1].end() :] if labels else low
    hits = _ALIAS_RE.findall(region)
    if labels and hits:
        hits = hits[:1]  # the name right after the label
    if not hits:
        return None
    alias = hits[-1]
    name = next(s for s, al in ALIASES.items() if alias in al)
    return name if name in allowed else None


def evidence_choice(entries: Sequence[BankEntry], cfg: EvoChamberConfig) -> str:
    """The structure with the best mean outcome among ``entries``, a structure without
    evidence counting as ``cfg.q_init`` (optimism, so untried structures get tried); ties go
    to ``cfg.fallback_structure``, then ``cfg.structures`` order."""
    stats: dict[str, list[float]] = {}
    for e in entries:
        if e.structure in cfg.structures:
            stats.setdefault(e.structure, []).append(e.outcome)

    def value(s: str) -> tuple[float, bool, int]:
        v = float(np.mean(stats[s])) if s in stats else cfg.q_init
        return (v, s == cfg.fallback_structure, -cfg.structures.index(s))

    return max(cfg.structures, key=value)


def note_prompt(structure: str, problem: str, final: str, reward: float) -> str:
    verdict = "succeeded" if reward >= 0.5 else "failed"
    return (
        f"Your team used the '{structure}' structure on this task and {verdict} "
        f"(reward {reward:.2f}).\nTask:\n{problem.strip()[:600]}\nTeam answer (end):\n"
        f"{final.strip()[-400:]}\n\nIn one sentence, say why this structure worked or did not "
        "for this kind of task. Reply: NOTE: <sentence>"
    )


def parse_note(text: str, max_chars: int = 240) -> str | None:
    """The sentence after ``NOTE:``, else the first non-empty line; None if empty."""
    m = re.search(r"note\s*:\s*(.+)", text or "", re.I)
    line = m.group(1) if m else next((ln for ln in (text or "").splitlines() if ln.strip()), "")
    line = " ".join(line.split())[:max_chars]
    return line or None
