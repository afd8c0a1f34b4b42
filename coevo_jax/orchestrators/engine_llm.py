"""The one place the orchestrator CLIs turn a model path into a ``TextLLM`` over the rollout bridge.

- ``engine="inprocess"``: loads the weights and serves them with the in-process JAX engine.
- ``engine="http"``: a vLLM-protocol server holds the weights; only the tokenizer (for the
  chat template) and the model config (family, context length) are read here, never the
  weights (an 8B model would be ~32 GB of fp32 for nothing).

The context length comes from the model config (``max_position_embeddings``, GGUF
``context_length``) and becomes ``EngineTextLLM.context_length``, so every prompt is checked
against it. The orchestrators sit above ``rollout_bridge`` (docs/design.md §1), so this module
imports it directly; only the CLIs import this module, when a command runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coevo_jax.models.config import ModelConfig
from coevo_jax.models.default import default_model_path
from coevo_jax.models.gguf import hf_config_from_metadata, read_metadata
from coevo_jax.models.hf_loader import read_config
from coevo_jax.models.loading import load
from coevo_jax.models.tokenizer import Tokenizer
from rollout_bridge.engines import engine_spec
from rollout_bridge.http_engine import HTTPEngine
from rollout_bridge.local_engine import InProcessEngine
from rollout_bridge.text import EngineTextLLM


def load_tokenizer_and_config(path: str | os.PathLike) -> tuple[Any, Any]:
    """``(Tokenizer | None, ModelConfig)`` of an HF directory or a ``.gguf``, without weights.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: not an HF directory / GGUF, or unreadable metadata.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"model path not found: {p}")
    if p.name == "config.json":
        p = p.parent
    if p.is_dir():
        return Tokenizer.from_hf_dir(str(p)), read_config(p)
    if p.suffix == ".gguf":
        meta = read_metadata(p)
        # Whether embeddings are tied does not matter without weights.
        hf = hf_config_from_metadata(meta, tied=True, source=os.fspath(p))
        cfg = ModelConfig.from_hf_dict(hf, source=os.fspath(p))
        return Tokenizer.from_gguf_metadata(meta, source=os.fspath(p)), cfg
    raise ValueError(f"{p}: expected an HF model directory or a .gguf file")


def engine_text_llm(
    *,
    prog: str,
    engine: str = "inprocess",
    model: str | None = None,
    url: str | None = None,
    served_model_name: str | None = None,
    agent_ids: Mapping[str, int] | None = None,
    max_prompt_tokens: int | None = None,
) -> Any:
    """A ``rollout_bridge.text.EngineTextLLM`` for a CLI; failures exit with ``prog: reason``.

    Args:
      prog: the command name, for error messages (e.g. "coevo flyroute").
      engine: "inprocess" or "http".
      model: weights + tokenizer path (default: the project's default model, SmolLM2-135M).
      url / served_model_name: the server and the name its base model answers to (http).
      agent_ids: agent name -> engine agent id (-1 is the base model).
      max_prompt_tokens: optional cap below the context-derived budget.
    """
    try:
        kind = engine_spec(engine)
    except ValueError as e:
        raise SystemExit(f"{prog}: {e}") from e
    if kind.needs_vllm:  # the orchestrators reach a vLLM server through http
        raise SystemExit(
            f"{prog}: engine {kind.name} is for training; start `coevo serve --engine vllm` "
            "and use --engine http --url URL"
        )
    if kind.needs_urls and not url:
        raise SystemExit(f"{prog}: --engine {kind.name} needs --url")
    try:
        path = model or default_model_path()
        if not kind.loads_weights:  # a server holds the weights: the tokenizer is enough
            tok, cfg = load_tokenizer_and_config(path)
            decoder = None
        else:
            decoder, tok = load(path)
            cfg = decoder.config
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"{prog}: cannot load the model/tokenizer: {e}") from e
    if tok is None:
        raise SystemExit(f"{prog}: {path} has no tokenizer; the orchestrators need a chat template")
    if kind.loads_weights:
        eng = InProcessEngine(
            decoder.params, cfg, None, eos_ids=tok.eos_token_ids, pad_id=tok.pad_token_id
        )
    else:
        eng = HTTPEngine(
            url,
            base_model=served_model_name or model or "SmolLM2-135M-Instruct",
            adapter_dir=tempfile.mkdtemp(prefix="orchestrator-adapters-"),
            eos_ids=tok.eos_token_ids,
            family=cfg.family,
        )
    return EngineTextLLM(
        eng,
        tok,
        dict(agent_ids or {}),
        context_length=int(cfg.max_position_embeddings),
        max_prompt_tokens=max_prompt_tokens,
    )
