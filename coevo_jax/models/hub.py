"""Turns a model reference into a local path: a directory, a ``.gguf`` file, ``default`` or a
Hugging Face Hub id.

A Hub id (``org/name``, e.g. ``Qwen/Qwen3-4B``) is fetched with ``huggingface_hub``'s
``snapshot_download``, limited to what :func:`coevo_jax.models.load` reads: ``config.json``,
the tokenizer files, the generation config and the safetensors weights with their index
(never PyTorch ``.bin`` files or other formats a repository may also carry). The usual
environment variables apply and are read when the reference is resolved, not when
``huggingface_hub`` was imported: ``HF_HUB_CACHE`` (else ``HF_HOME``/hub, else the library's
default, which also honours ``XDG_CACHE_HOME``), ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``
(then only the cache is looked at) and ``HF_TOKEN`` for gated repositories.

A local path always wins: ``Qwen/Qwen3-4B`` names a Hub model only if no such file or
directory exists relative to the working directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    HFValidationError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from coevo_jax._errors import UserError
from coevo_jax.models.default import default_model_path

DEFAULT = "default"

# What load() reads from a model repository; everything else in it is left on the Hub.
ALLOW_PATTERNS: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "*.safetensors",
    "model.safetensors.index.json",
)

# org/name: exactly one slash, neither part empty; validate_repo_id checks the characters.
_HUB_ID = re.compile(r"^[^/\\~.][^/\\]*/[^/\\]+$")


class HubModelError(UserError, FileNotFoundError):
    """A model reference is neither a local path nor a Hub model that can be had (offline and
    not cached, no such repository, no access); the message names the reference."""


def looks_like_hub_id(ref: str) -> bool:
    """True for ``org/name`` strings that are valid Hub repository ids and not obviously
    local paths (absolute, ``./``, ``~``, a ``.gguf`` file)."""
    if not _HUB_ID.match(ref) or ref.endswith(".gguf"):
        return False
    try:
        validate_repo_id(ref)
    except HFValidationError:
        return False
    return True


def hub_offline() -> bool:
    """Whether the Hub is off limits: ``HF_HUB_OFFLINE`` (else ``TRANSFORMERS_OFFLINE``) as
    set now, read as ``huggingface_hub`` reads it; unset, the value it read at import."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if not value:
        return constants.HF_HUB_OFFLINE
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_cache_dir() -> Path:
    """The Hub cache as the environment names it now (``huggingface_hub.constants`` froze
    it when the library was imported)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def download(repo_id: str) -> Path:
    """The local snapshot directory of Hub model ``repo_id`` at its ``main`` revision,
    downloading the files :data:`ALLOW_PATTERNS` selects unless offline (then the cache
    must hold them).

    Raises:
      HubModelError: offline and not cached, no such repository, gated without a token, the
        Hub unreachable and nothing cached; the message names ``repo_id`` and the cache.
    """
    offline = hub_offline()
    cache = hub_cache_dir()
    try:
        folder = snapshot_download(
            repo_id,
            cache_dir=cache,
            local_files_only=offline,
            allow_patterns=list(ALLOW_PATTERNS),
        )
    except LocalEntryNotFoundError as e:
        if isinstance(e, IncompleteSnapshotError):
            how = str(e)
        elif offline:
            how = (
                "HF_HUB_OFFLINE is set; download it once with network access "
                f"(`hf download {repo_id}`) or unset HF_HUB_OFFLINE"
            )
        else:
            how = f"the Hub could not be reached: {e}"
        raise HubModelError(
            f"model {repo_id!r}: no such local path, and the Hugging Face Hub model is not in "
            f"the cache {cache} ({how})"
        ) from e
    except HfHubHTTPError as e:  # no such repository, gated, unauthorised, Hub down
        raise HubModelError(
            f"model {repo_id!r}: no such local path, and fetching it from the Hugging Face Hub "
            f"failed: {type(e).__name__}: {e}"
        ) from e
    return Path(folder)


def resolve_model(ref: str | os.PathLike) -> Path:
    """A local path for model reference ``ref``.

    Args:
      ref: ``"default"`` (the embedded SmolLM2 GGUF), an existing file or directory, or a
        Hub id ``org/name``.

    Returns:
      The path itself for local references; the snapshot directory in the Hub cache for ids.

    Raises:
      FileNotFoundError: ``ref`` is no existing path and not shaped like a Hub id (or the
        default model's package is missing).
      HubModelError: a Hub id that cannot be had (see :func:`download`).
    """
    if isinstance(ref, str) and ref == DEFAULT:
        return Path(default_model_path())
    path = Path(ref).expanduser()
    if path.exists():
        return path
    if isinstance(ref, str) and looks_like_hub_id(ref):
        return download(ref)
    raise FileNotFoundError(f"model path not found: {path}")
