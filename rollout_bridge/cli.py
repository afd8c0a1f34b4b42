"""``coevo serve``: start a rollout server (vLLM with runtime LoRA, or the local JAX server).

The command owns its servers: Ctrl-C, SIGTERM and SIGHUP all stop every server it started
(each runs in its own process group, so a signal to ``coevo serve`` alone would otherwise
leave them holding their ports).

The launcher and the vLLM venv are imported when the command runs: ``rollout_bridge``'s
modules load JAX, which ``coevo --help`` must not.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from pathlib import Path

from coevo_jax._errors import UserError
from rollout_bridge.engines import engine_arg, engine_spec


def _vllm_dtype(text: str) -> str:
    from rollout_bridge.launcher import VLLM_DTYPES

    if text not in VLLM_DTYPES:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(VLLM_DTYPES)}, not {text!r}")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start a rollout server (vllm or the local JAX server)")
    p.add_argument(
        "--engine",
        type=engine_arg,
        default="inprocess",
        help="vllm (a vLLM server with runtime LoRA, in its own venv) or inprocess (the JAX "
        "server in this install; default; 'local' is kept as its alias for one release)",
    )
    p.add_argument(
        "--model",
        action="append",
        help="model: 'default' (the embedded SmolLM2), a .gguf, an HF directory or hub name; "
        "repeat for heterogeneous runs (one server each). vllm default: 'default'",
    )
    p.add_argument("--random-config", help="local engine: serve a random model of this config.json")
    p.add_argument("--agents", type=int, default=4, help="agents served (LoRA slots)")
    p.add_argument(
        "--max-lora-rank", type=int, default=16, help="largest adapter rank served (default 16)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=8000, help="first port; server k listens on port + k"
    )
    p.add_argument(
        "--served-model-name",
        help="the name the base model answers to (default: SmolLM2-135M-Instruct for vllm, "
        "the --model argument for local)",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for /health")
    p.add_argument(
        "--vllm-python",
        help="vllm engine: interpreter that imports vllm (e.g. a GPU build); default: the "
        "project's venv (python -m rollout_bridge.vllm_env)",
    )
    p.add_argument(
        "--dtype",
        type=_vllm_dtype,
        help="vllm engine: the server's dtype, bfloat16, float16 or float32 (default: bfloat16 "
        "where this machine multiplies bf16 natively, else float32)",
    )
    p.add_argument(
        "--setup", action="store_true", help="vllm engine: create the project's vLLM venv first"
    )
    p.set_defaults(func=main)


class ServeArgumentError(UserError, ValueError):
    """Options of ``coevo serve`` that do not go together."""


class VLLMMissingError(UserError, RuntimeError):
    """A vLLM engine was asked for, and there is no interpreter that imports vLLM."""


def require_vllm(python: str | None, *, option: str, how: str) -> None:
    """Checks, before any data is built or model loaded, that a vLLM server can start.

    Args:
      python: the interpreter the user named (``option``), or None for the project's venv.
      option: how the command names that interpreter (``--vllm-python``,
        ``rollout.vllm_python``), for the message.
      how: how to name one in this command (``pass --vllm-python PATH``); a command without
        ``--vllm-python`` must not suggest it.

    Raises:
      VLLMMissingError: no venv, or ``python`` is missing or cannot import vllm.
    """
    from rollout_bridge.vllm_env import VLLMEnvError, default_venv, find_vllm_python, is_ready

    if python is None:
        venv = default_venv()
        if not is_ready(venv):
            raise VLLMMissingError(
                f"no vLLM venv at {venv}: create it with `python -m rollout_bridge.vllm_env`, "
                f"or {how} (an interpreter that imports vllm)"
            )
        return
    try:
        find_vllm_python(python)
    except VLLMEnvError as e:
        reason = str(e).rpartition(": ")[2]  # the message names the option as serve spells it
        raise VLLMMissingError(f"{option} {python}: {reason}") from e


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: shut down like Ctrl-C."""


def _raise_stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


@contextlib.contextmanager
def _stop_on_signals():
    old = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _start(args: argparse.Namespace, model: str | None, port: int):
    from rollout_bridge.launcher import launch_vllm, local_command, start_server

    if engine_spec(args.engine).needs_vllm:
        return launch_vllm(
            model or "default",
            served_name=args.served_model_name or "SmolLM2-135M-Instruct",
            agents=args.agents,
            max_lora_rank=args.max_lora_rank,
            python=args.vllm_python,
            port=port,
            timeout=args.timeout,
            dtype=args.dtype,
        )
    if model is not None and not Path(model).exists():  # before a server starts
        raise FileNotFoundError(f"model path not found: {model}")
    argv, env = local_command(
        model=model,
        random_config=args.random_config,
        agents=args.agents,
        max_lora_rank=args.max_lora_rank,
        host=args.host,
        port=port,
        served_model_name=args.served_model_name,
    )
    print(f"starting: {' '.join(argv)}", flush=True)
    return start_server(argv, env, f"http://{args.host}:{port}", timeout=args.timeout)


def check_args(args: argparse.Namespace) -> None:
    """Refuses a bad ``--random-config`` before any server starts: a started server that dies
    on it reports only its exit code, after the wait for /health."""
    if engine_spec(args.engine).needs_urls:
        raise ServeArgumentError(
            f"coevo serve starts a server: --engine inprocess or vllm, not {args.engine}"
        )
    if args.random_config is None:
        return
    if engine_spec(args.engine).needs_vllm:
        raise ServeArgumentError("--random-config is for --engine inprocess (the JAX server)")
    # Imported here: it loads JAX, which building the `coevo` parser must not.
    from coevo_jax.models.hf_loader import read_config_file

    read_config_file(args.random_config)


def _alive(server) -> bool:
    return server.alive() if hasattr(server, "alive") else server.proc.poll() is None


def main(args: argparse.Namespace) -> int:
    check_args(args)
    vllm = engine_spec(args.engine).needs_vllm
    if vllm and args.setup and not args.vllm_python:
        from rollout_bridge.vllm_env import setup_venv

        setup_venv()
    if vllm:
        require_vllm(
            args.vllm_python,
            option="--vllm-python",
            how="`coevo serve --engine vllm --setup`, or pass --vllm-python PATH",
        )
    servers = []
    with _stop_on_signals():
        try:
            for k, model in enumerate(args.model or [None]):
                servers.append(_start(args, model, args.port + k))
                print(f"ready: {servers[-1].url}", flush=True)
            while all(_alive(s) for s in servers):
                time.sleep(1.0)
            return 1
        except (KeyboardInterrupt, _Stop):
            return 0
        finally:
            for s in servers:
                s.stop()
