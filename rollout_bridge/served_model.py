"""The HF model directory an external server (vLLM) loads for a project model path.

The project reads GGUF files itself (``coevo_jax.models``); vLLM wants an HF directory. A GGUF
(or ``default``, the embedded SmolLM2) is exported once with ``coevo_jax.models.hf_export``
into a cache keyed by the file's content hash, so a run reuses the export of an unchanged
file and a changed file gets a new one. HF directories and hub names pass through untouched.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from coevo_jax import models
from coevo_jax.models.hf_export import save_hf

ENV_VAR = "COEVO_EXPORT_CACHE"


def export_cache() -> Path:
    """``$COEVO_EXPORT_CACHE``, else ``~/.cache/coevo-jax/hf-export``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "coevo-jax" / "hf-export"


def file_digest(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """sha256 of a file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def served_model_dir(
    path: str, *, cache: str | os.PathLike | None = None, progress: bool = False
) -> str:
    """What to pass as the server's model for the project model ``path``.

    Args:
      path: ``default`` (the embedded SmolLM2 GGUF), a ``.gguf`` file, an HF model directory,
        or a hub name (returned as is, for online users).
      cache: export cache root (default :func:`export_cache`).
      progress: show the export's progress bar.

    Returns:
      An HF directory (``config.json``, ``model.safetensors``, ``tokenizer.json``) or ``path``.

    Raises:
      FileNotFoundError: ``path`` looks like a local file (``.gguf``) but does not exist.
    """
    if path == "default":
        path = models.default_model_path()
    p = Path(path).expanduser()
    if p.is_dir():
        return str(p)
    if not p.is_file():
        if p.suffix == ".gguf":
            raise FileNotFoundError(f"{p}: no such GGUF file")
        return path  # a hub name
    out = Path(cache or export_cache()) / f"{p.stem}-{file_digest(p)[:16]}"
    if (out / "config.json").is_file():
        return str(out)
    model, tok = models.load(str(p), progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    # save_hf writes atomically, so a crash mid-export leaves no half directory behind
    save_hf(model.params, model.config, out, tokenizer=tok, overwrite=True, progress=progress)
    return str(out)
