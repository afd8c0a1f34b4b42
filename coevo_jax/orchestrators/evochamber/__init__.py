"""EvoChamber (docs/design.md §7): test-time co-evolution of an agent pool at individual, team and
population scales, over any :class:`coevo_jax.text_llm.TextLLM`.

Modules: ``config`` (the config), ``state`` (state as data + pure updates + replay), ``team``
(eqs. 3-5), ``leadlearn`` (structure choice), ``structures`` (the four protocols),
``archive`` (reflection + retrieval), ``codream`` (five-phase knowledge flow), ``lifecycle``
(genesis, fork, merge, prune, specialize), ``loop`` (the online loop and event log),
``streams``, ``baselines``, ``report``, ``embed``, ``scripted`` (a deterministic stand-in LLM),
``cli`` (``coevo evochamber``).
"""

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.loop import Runtime, load_events, run_stream, run_task
from coevo_jax.orchestrators.evochamber.state import ChamberState, apply_event, init_state, replay

__all__ = [
    "ChamberState",
    "EvoChamberConfig",
    "Runtime",
    "apply_event",
    "init_state",
    "load_events",
    "replay",
    "run_stream",
    "run_task",
]
