"""``coevo data``: build mixtures, list sources, look at records.

    coevo data build --mixture cpu --out data/cpu [--seed 42]
    coevo data build --mixture paper --out data/paper --local gsm8k=gsm8k_train.jsonl \\
        --local gsm8k:test=gsm8k_test.jsonl ...
    coevo data show data/cpu/train.jsonl [-n 3] [--class code] [--prompt]
    coevo data sources
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import defaultdict

from coevo_jax import cli as coevo_cli
from coevo_jax.data.jsonl import iter_records
from coevo_jax.data.mixtures import MIXTURES, build_mixture, hub_loader, write_mixture
from coevo_jax.data.record import CLASSES
from coevo_jax.data.sources import SOURCES
from coevo_jax.data.templates import render_prompt


def _parse_local(items: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--local expects SOURCE[:SPLIT]=PATH, got {item!r}")
        key, path = item.split("=", 1)
        if key.split(":")[0] not in SOURCES:
            raise SystemExit(
                f"--local: unknown source {key!r}; known: {', '.join(sorted(SOURCES))}"
            )
        out[key].extend(p for p in path.split(",") if p)
    return dict(out)


def _build(args: argparse.Namespace) -> int:
    spec = MIXTURES[args.mixture]
    loader = None
    if not spec.offline:
        loader = hub_loader(_parse_local(args.local), on_error=args.on_error)
    elif args.local:
        raise SystemExit(
            f"mixture {spec.name!r} is built from installed packages; --local is not used"
        )
    built = build_mixture(spec, seed=args.seed, loader=loader, progress=True)
    out = write_mixture(built, args.out)
    files = built.manifest["files"]
    print(f"wrote {out} (seed {built.manifest['seed']})")
    for name, info in files.items():
        by_class = ", ".join(f"{k} {v}" for k, v in info["by_class"].items())
        print(f"  {name:16s} {info['records']:6d}  ({by_class})")
    errs = sum(s.get("n_errors", 0) for s in built.manifest["sources"].values())
    if errs:
        print(
            f"  {errs} malformed source rows skipped; see manifest.json 'sources'", file=sys.stderr
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    """Prints the first ``-n`` matching records; a malformed line stops it with a RecordError
    (``coevo`` prints that as one line naming the file, line and field)."""
    shown = 0
    for r in iter_records(args.file):
        if args.cls and r.cls != args.cls:
            continue
        if args.source and r.source != args.source:
            continue
        if args.prompt:
            print(f"=== {r.id} [{r.cls}]")
            print(render_prompt(r))
        else:
            print(json.dumps(r.to_dict(), ensure_ascii=False, indent=2))
        shown += 1
        if shown >= args.n:
            break
    return 0


def _sources(args: argparse.Namespace) -> int:
    for s in SOURCES.values():
        hub = ", ".join(p + (f"[{c}]" if c else "") for p, c, _ in s.hf[:2]) + (
            " ..." if len(s.hf) > 2 else ""
        )
        print(
            f"{s.name:14s} {s.cls:9s} train={s.train_split} test={s.test_split}  {hub or '(local files only)'}"
        )
        if s.note:
            print(f"{'':25s}{s.note}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``coevo data {build,show,sources}``."""
    p = subparsers.add_parser("data", help="build data mixtures and inspect records")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    b = sub.add_parser("build", help="write train/eval JSONL files and a manifest")
    b.add_argument("--mixture", required=True, choices=sorted(MIXTURES))
    b.add_argument("--out", required=True, help="output folder")
    b.add_argument(
        "--seed", type=int, default=None, help="sampling seed (default: the mixture's, 42)"
    )
    b.add_argument(
        "--local",
        action="append",
        default=[],
        metavar="SOURCE[:SPLIT]=PATH",
        help="read a source from local files (comma-separated; JSONL, JSON or parquet) "
        "instead of the HF hub; repeatable",
    )
    b.add_argument(
        "--on-error",
        choices=("skip", "raise"),
        default="skip",
        help="malformed source rows: report and skip (default), or stop",
    )
    b.set_defaults(func=_build)

    s = sub.add_parser("show", help="print records of a JSONL file")
    s.add_argument("file")
    s.add_argument("-n", type=int, default=3, help="how many (default 3)")
    s.add_argument("--class", dest="cls", choices=CLASSES)
    s.add_argument("--source")
    s.add_argument(
        "--prompt", action="store_true", help="print the rendered prompt instead of JSON"
    )
    s.set_defaults(func=_show)

    ls = sub.add_parser("sources", help="list the known sources")
    ls.set_defaults(func=_sources)


def main(argv: list[str] | None = None) -> int:
    """``coevo data ARGV``, with the ``coevo`` command's one-line user errors (exit 2)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return coevo_cli.main(["data", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
