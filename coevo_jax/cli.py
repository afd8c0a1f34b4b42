"""The ``coevo`` command.

Each subcommand lives beside the code it drives, in a module exposing
``register(subparsers)``; this file only routes. A subcommand whose module is not part of
this build is left out of ``--help`` instead of breaking every other subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand module -> registers one or more subcommands
SUBCOMMAND_MODULES = (
    "coevo_jax.models.cli",  # generate
    "coevo_jax.lora.cli",  # merge
    "coevo_jax.data.cli",  # data build / data show
    "coevo_jax.train.cli",  # train
    "coevo_jax.eval.cli",  # eval
    "rollout_bridge.cli",  # serve
    "coevo_jax.orchestrators.evochamber.cli",  # evochamber
    "coevo_jax.orchestrators.flyroute.cli",  # flyroute
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coevo", description="Co-evolving LLM agents (CERA-MoA, EvoChamber, FlyRoute) in JAX."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (name == e.name or name.startswith(e.name + ".")):  # not in this build
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
