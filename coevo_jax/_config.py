"""Frozen-dataclass configs built from plain dicts and YAML, tunix-style.

Every component owns one frozen dataclass validated in ``__post_init__``. YAML files in
``configs/`` map 1:1 onto them: nested mappings become nested dataclasses, and a key the
dataclass does not declare is an error that names its full dotted path (a typo must never be
silently ignored).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from coevo_jax._errors import UserError

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A config value or key is invalid; the message names the dotted path."""


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _convert(tp: Any, value: Any, path: str) -> Any:
    tp = _unwrap_optional(tp)
    if value is None:
        return None
    if _is_dataclass_type(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(
                f"{path}: expected a mapping for {tp.__name__}, got {type(value).__name__}"
            )
        return from_dict(tp, value, path=path)
    origin = typing.get_origin(tp)
    if origin is tuple and isinstance(value, (list, tuple)):
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        if args and len(args) == len(value):
            return tuple(
                _convert(a, v, f"{path}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        return tuple(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:  # YAML 1.1 reads "1e-4" as a string
            return float(value)
        except ValueError as e:
            raise ConfigError(f"{path}: expected a float, got {value!r}") from e
    return value


def from_dict(cls: type[T], data: dict[str, Any], *, path: str = "") -> T:
    """Builds dataclass ``cls`` from ``data``, recursing into nested dataclass fields.

    Raises:
      ConfigError: for a key ``cls`` does not declare (naming the dotted path), or for
        a nested value of the wrong kind. Validation errors from ``__post_init__`` are
        re-raised as ConfigError with the path prefixed.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(
            f"unknown config key(s) {', '.join(where + k for k in unknown)} for {cls.__name__}; "
            f"known keys: {', '.join(sorted(names))}"
        )
    kwargs = {k: _convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{path or cls.__name__}: {e}") from e


def check_at_least(cfg: Any, minimum: int, names: Iterable[str]) -> None:
    """Raises ValueError for the first field of ``names`` on ``cfg`` below ``minimum``
    (``"<name> must be >= <minimum>, got <value>"``).

    The range check config ``__post_init__`` methods share, so every config words it alike;
    :func:`from_dict` turns the ValueError into a :class:`ConfigError` naming the section.
    """
    for name in names:
        value = getattr(cfg, name)
        if value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """The inverse of :func:`from_dict`: nested plain dicts, tuples as lists."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v) if f.init}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v

    return conv(cfg)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies ``a.b.c=value`` strings (values parsed as YAML scalars) to a nested dict."""
    out = yaml.safe_load(yaml.safe_dump(data)) if data else {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key}: {p} is not a mapping")
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def load_yaml(cls: type[T], path: str | Path, overrides: list[str] | None = None) -> T:
    """Loads YAML file ``path`` into dataclass ``cls``, then applies ``overrides``.

    Errors name the file, or the command-line overrides when the file alone loads.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    try:
        return from_dict(cls, apply_overrides(data, overrides or []))
    except ConfigError as e:
        err = e
    # Blame what is wrong: the overrides when the file alone loads, else the file.
    if overrides:
        try:
            from_dict(cls, data)
        except ConfigError:
            pass
        else:
            raise ConfigError(f"command-line override ({' '.join(overrides)}): {err}") from err
    raise ConfigError(f"{path}: {err}") from err
