"""The ``coevo`` command.

Each subcommand lives beside the code it drives, in a module exposing
``register(subparsers)``; this file only routes. A subcommand whose module is not part of
this build is left out of ``--help`` instead of breaking every other subcommand.

A user's mistake gets one line, not a traceback: an exception the project marks as the user's
(``coevo_jax._errors``: a bad config key or value, a missing file, not a run directory, a bad
model path) and a ``SystemExit`` carrying a message both print ``coevo <command>: <message>`` on
stderr and exit 2. Anything else is a bug and keeps its traceback; so does a user error when
``COEVO_TRACEBACK=1`` is set.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from coevo_jax._errors import user_message

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


def command_name(args: argparse.Namespace) -> str:
    """``"train"``, or ``"data build"`` for a subcommand with actions (``<name>_command``)."""
    name = args.command
    action = getattr(args, f"{name}_command", None)
    return f"{name} {action}" if action else name


def _one_line(command: str, message: str) -> str:
    message = " ".join(message.split())
    return message if message.startswith("coevo ") else f"coevo {command}: {message}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SystemExit as e:
        if not isinstance(e.code, str):  # an exit status (argparse has printed its own usage)
            raise
        print(_one_line(command_name(args), e.code), file=sys.stderr)
        return 2
    except Exception as e:
        message = user_message(e)
        if message is None or os.environ.get("COEVO_TRACEBACK") == "1":
            raise
        print(_one_line(command_name(args), message), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
