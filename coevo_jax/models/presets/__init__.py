"""Architecture presets: the ``config.json`` fields of the public Hub models the paper configs
name, for ``coevo plan`` when no ``config.json`` is at hand.

A plan needs only a model's shapes (``coevo_jax.models.config.ModelConfig``), not its weights.
When the model's own ``config.json`` is reachable (a local directory, or a Hub id already in
the Hugging Face cache) the planner reads that; these presets stand in only when it is not
(this machine never downloads weights). Each file holds the architecture fields of the
model's public ``config.json`` on the Hugging Face Hub, written from the model cards and
checked by the parameter counts the model cards state (``tests/train/test_plan.py``):

* ``Qwen/Qwen3-4B``: 4.0B parameters (hidden 2560, 36 layers, 32 query / 8 KV heads of 128,
  MLP 9728, vocabulary 151936, tied embeddings, RoPE base 1e6).
* ``meta-llama/Llama-3.2-3B-Instruct``: 3.2B (hidden 3072, 28 layers, 24 / 8 heads of 128,
  MLP 8192, vocabulary 128256, tied, llama3 RoPE scaling x32 from 8192).
* ``microsoft/Phi-4-mini-instruct``: 3.8B (hidden 3072, 32 layers, 24 / 8 heads of 128,
  MLP 8192, vocabulary 200064, tied, 3/4 of each head rotated). Its ``rope_scaling``
  (longrope, two 48-entry factor lists) is left out: it changes no shape and no FLOP count,
  and a run reads the real ``config.json`` anyway. The preset therefore maps to plain RoPE.

They are used for planning only; loading a model always reads its own files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from coevo_jax._errors import UserError
from coevo_jax.models.config import ModelConfig

_DIR = Path(__file__).resolve().parent


def preset_file(hub_id: str) -> Path:
    """Where the preset of ``hub_id`` (``org/name``) lies: ``org--name.json`` here."""
    return _DIR / (hub_id.replace("/", "--") + ".json")


def preset_ids() -> list[str]:
    """The Hub ids that have a preset."""
    return sorted(p.stem.replace("--", "/", 1) for p in _DIR.glob("*.json"))


def hub_preset(ref: str) -> dict[str, Any] | None:
    """The preset ``config.json`` dict of Hub id ``ref``, or None when there is none.

    A bare model name (``Qwen3-4B``, the last part of a local path such as
    ``checkpoints/Qwen3-4B``) matches the one preset with that name, if exactly one has it.
    """
    ids = preset_ids()
    if ref not in ids:
        named = [i for i in ids if i.split("/", 1)[1] == Path(ref).name]
        if len(named) != 1:
            return None
        ref = named[0]
    return json.loads(preset_file(ref).read_text())


class NoModelConfigError(UserError, FileNotFoundError):
    """Neither a ``config.json`` nor a preset describes the model a plan names."""


def planning_config(path: str, name: str = "") -> tuple[ModelConfig, str]:
    """``(ModelConfig, source)`` of a model reference, without reading weights or downloading.

    In order: the embedded default GGUF's metadata (``path: default``); a local directory's
    ``config.json``, or a ``config.json`` / ``.gguf`` file; a Hub id's ``config.json`` already
    in the Hugging Face cache; the preset of that Hub id, also matched by ``name`` or the
    path's last part (:func:`hub_preset`). ``source`` says which was used.

    Raises:
      NoModelConfigError: none of these is at hand.
    """
    from coevo_jax.models.hf_loader import read_config, read_config_file
    from coevo_jax.models.hub import hub_cache_dir, looks_like_hub_id

    if path == "default":
        from coevo_jax.models.default import default_model_path

        return _gguf_config(default_model_path()), "default GGUF metadata"
    local = Path(path).expanduser()
    if local.is_dir():
        return read_config(local), str(local / "config.json")
    if local.is_file():
        if local.suffix == ".gguf":
            return _gguf_config(local), f"{local} metadata"
        return read_config_file(local), str(local)
    if looks_like_hub_id(path):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json", cache_dir=hub_cache_dir())
        if isinstance(cached, str):
            return read_config_file(cached), cached
    for key in (path, name):
        preset = hub_preset(key) if key else None
        if preset is not None:
            return ModelConfig.from_hf_dict(preset, source=f"preset {key}"), f"preset ({key})"
    raise NoModelConfigError(
        f"model {path!r}: no local config.json, not in the Hugging Face cache, and no bundled "
        "preset (coevo_jax/models/presets) by that path or name"
    )


def _gguf_config(path: str | os.PathLike) -> ModelConfig:
    """The ``ModelConfig`` a GGUF file's metadata describes (its tensors are not read)."""
    from coevo_jax.models.gguf import hf_config_from_metadata
    from coevo_jax.models.gguf_file import check_gguf, field_value, open_reader

    reader = open_reader(check_gguf(path))
    meta = {key: field_value(field) for key, field in reader.fields.items()}
    tied = "output.weight" not in {t.name for t in reader.tensors}
    return ModelConfig.from_hf_dict(hf_config_from_metadata(meta, tied=tied, source=str(path)))
