"""``coevo serve``: start a rollout server (vLLM with runtime LoRA, or the local JAX server)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start a rollout server (vllm or the local JAX server)")
    p.add_argument("--engine", choices=("vllm", "local"), default="local")
    p.add_argument(
        "--model",
        action="append",
        help="model (repeat for heterogeneous runs: one vLLM server each)",
    )
    p.add_argument("--random-config", help="local engine: serve a random model of this config.json")
    p.add_argument("--agents", type=int, default=4, help="LoRA slots (vLLM --max-loras)")
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port", type=int, default=8000, help="first port; server k listens on port + k"
    )
    p.add_argument("--served-model-name")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for /health")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rollout_bridge.launcher import local_command, start_server, vllm_command

    models = args.model or [None]
    handles = []
    try:
        for k, model in enumerate(models):
            port = args.port + k
            if args.engine == "vllm":
                if model is None:
                    raise SystemExit("coevo serve --engine vllm needs --model")
                argv, env = vllm_command(
                    model,
                    agents=args.agents,
                    max_lora_rank=args.max_lora_rank,
                    host=args.host,
                    port=port,
                    served_model_name=args.served_model_name,
                )
            else:
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
            url = f"http://{args.host}:{port}"
            print(f"starting: {' '.join(argv)}", flush=True)
            handles.append(start_server(argv, env, url, timeout=args.timeout))
            print(f"ready: {url}", flush=True)
        while all(h.proc.poll() is None for h in handles):
            time.sleep(1.0)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for h in handles:
            h.stop()
