"""The ``coevo`` command.

Each subcommand lives beside the code it drives, in a module exposing
``register(subparsers)``; this file only routes. A subcommand whose module is not part of
this build is left out of ``--help`` instead of breaking every other subcommand.

A user's mistake gets one line, not a traceback: an exception the project marks as the user's
(``coevo_jax._errors``: a bad config key or value, a missing file, not a run directory, a bad
model path) and a ``SystemExit`` carrying a message both print ``coevo <command>: <message>`` on
stderr and exit 2. Anything else is a bug and keeps its traceback; so does a user error when
``COEVO_TRACEBACK=1`` is set.

``coevo --help`` and ``coevo <command> --help`` must print in well under a second, so building
the parser imports no JAX, Flax, SciPy or training loop: each subcommand module imports those
inside its command function, and is itself loaded without its parent packages' ``__init__``
(:func:`import_cli_module`), because several packages (``coevo_jax.models``,
``coevo_jax.eval``, ``rollout_bridge``) re-export JAX code from theirs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from coevo_jax._errors import user_message

# subcommand module -> registers one or more subcommands
SUBCOMMAND_MODULES = (
    "coevo_jax.models.cli",  # generate
    "coevo_jax.lora.cli",  # merge
    "coevo_jax.data.cli",  # data build / data show
    "coevo_jax.train.cli",  # train, configs
    "coevo_jax.train.plan_cli",  # plan
    "coevo_jax.eval.cli",  # eval
    "rollout_bridge.cli",  # serve
    "coevo_jax.orchestrators.evochamber.cli",  # evochamber
    "coevo_jax.orchestrators.flyroute.cli",  # flyroute
)


def import_cli_module(name: str) -> ModuleType:
    """Imports subcommand module ``name`` (``coevo_jax.models.cli``) without running the
    ``__init__`` of the packages above it, unless they are imported already.

    The module is registered under its own name, so a later ``import`` of it (by a test, or
    once its package is imported by the command it runs) finds this same module.

    Raises:
      ModuleNotFoundError: ``name`` is not part of this build.
    """
    if name in sys.modules:
        return sys.modules[name]
    package, _, leaf = name.rpartition(".")
    if package in sys.modules:
        return importlib.import_module(name)
    top, *middle = package.split(".")
    spec = importlib.util.find_spec(top)  # a top-level spec imports nothing
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0], *middle, f"{leaf}.py") if locations else None
    if path is None or not path.is_file():
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("coevo-jax")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coevo", description="Co-evolving LLM agents (CERA-MoA, EvoChamber, FlyRoute) in JAX."
    )
    parser.add_argument(
        "--version", action="version", version=f"coevo {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = import_cli_module(name)
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
