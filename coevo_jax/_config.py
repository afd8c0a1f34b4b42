"""Frozen-dataclass configs built from plain dicts and YAML, tunix-style.

Every component owns one frozen dataclass validated in ``__post_init__``. YAML files map 1:1
onto them: nested mappings become nested dataclasses, and a key the dataclass does not declare
is an error that names its full dotted path and, where one is near, the key meant ("did you
mean ..."; a name another library uses, such as TRL's, is told our key: :func:`register_renames`).

Every value is checked against its field's type before the dataclass sees it: ``int``,
``float`` (an int is fine), ``bool``, ``str``, ``Literal`` choices, ``Optional`` and unions
(``bool | Literal["full", "dots"]``), tuples (a single value becomes a one-element tuple) and
nested dataclasses. The leaf checks are pydantic's (``TypeAdapter`` in strict mode, so ``True``
is no integer and ``2.5`` no count); the walk over the dataclasses stays here because it names
the dotted path, recurses into ``__post_init__`` validation, and wraps single values into
tuples, none of which a pydantic model of a frozen dataclass does without copying its fields.
One relaxation of strict mode: a float field takes a numeric string, because YAML 1.1 reads
``1e-4`` (no dot) as a string.

Configs ship in the package (``coevo_jax/configs``): :func:`resolve_config` takes a bundled
name (``cpu_reference``) or a path, from any directory.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from coevo_jax._errors import UserError

T = TypeVar("T")

BUNDLED_CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class ConfigError(UserError, ValueError):
    """A config value or key is invalid; the message names the dotted path."""


# ---------------------------------------------------------------------------------------------
# Names other libraries use for our keys


_RENAMES: dict[type, tuple[str, Mapping[str, str]]] = {}


def register_renames(cls: type, source: str, names: Mapping[str, str]) -> None:
    """Tells users of ``source`` (e.g. ``"TRL"``) which key of ``cls`` to use instead.

    ``names`` maps a bare key name (``num_generations``) to our dotted key from the root
    ``cls`` (``rollout.group_size``). The hint is given wherever the name appears as an
    unknown key: at the top level or in any section.
    """
    _RENAMES[cls] = (source, dict(names))


# ---------------------------------------------------------------------------------------------
# Type checking of one value


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def describe(tp: Any) -> str:
    """What a value of type ``tp`` looks like, in words (``"an integer or null"``)."""
    args = _union_args(tp)
    if args is not None:
        return " or ".join(describe(a) for a in args)
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(c) for c in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        items = typing.get_args(tp)
        if len(items) == 2 and items[1] is Ellipsis:
            return f"a list of {describe(items[0])}"
        return f"a list of {len(items)} ({', '.join(describe(a) for a in items)})"
    if _is_dataclass_type(tp):
        return f"a mapping of {tp.__name__} keys"
    words = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        type(None): "null",
    }
    return words.get(tp, getattr(tp, "__name__", str(tp)))


def _show(value: Any) -> str:
    """A value as the user wrote it: YAML scalars, Python's repr for strings."""
    if isinstance(value, bool) or value is None:
        return yaml.safe_dump(value).splitlines()[0]
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


@functools.lru_cache(maxsize=256)
def _adapter(tp: Any):
    # pydantic is imported on first use: `coevo --help` must stay fast (see coevo_jax.cli).
    from pydantic import TypeAdapter

    return TypeAdapter(tp)


def _admits(tp: Any, kind: type) -> bool:
    args = _union_args(tp)
    return tp is kind or (args is not None and any(_admits(a, kind) for a in args))


def _check_leaf(tp: Any, value: Any, path: str) -> Any:
    """``value`` validated (and an int widened to float) against a non-dataclass type."""
    if tp is Any:
        return value
    if isinstance(value, str) and _admits(tp, float) and not _admits(tp, str):
        try:  # YAML 1.1 reads "1e-4" as a string
            value = float(value)
        except ValueError:
            pass
    from pydantic import ValidationError

    try:
        return _adapter(tp).validate_python(value, strict=True)
    except ValidationError:
        raise ConfigError(f"{path}: expected {describe(tp)}, got {_show(value)}") from None


def _convert(tp: Any, value: Any, path: str, renames: _Renames) -> Any:
    """``value`` checked against field type ``tp``; nested dataclasses built."""
    args = _union_args(tp)
    if args is not None:
        if value is None and type(None) in args:
            return None
        structured = [a for a in args if _is_dataclass_type(a) or typing.get_origin(a) is tuple]
        if len(structured) == 1 and len(args) - (type(None) in args) == 1:
            return _convert(structured[0], value, path, renames)  # Optional[Dataclass | tuple]
        return _check_leaf(tp, value, path)
    if _is_dataclass_type(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected {describe(tp)}, got {_show(value)}")
        return _from_dict(tp, value, path, renames)
    if typing.get_origin(tp) is tuple:
        return _convert_tuple(tp, value, path, renames)
    return _check_leaf(tp, value, path)


def _convert_tuple(tp: Any, value: Any, path: str, renames: _Renames) -> tuple:
    if not isinstance(value, (list, tuple)):
        value = [value]  # `lora.target_modules=gate` means ("gate",), not ('g', 'a', 't', 'e')
    items = typing.get_args(tp)
    if len(items) == 2 and items[1] is Ellipsis:
        items = (items[0],) * len(value)
    elif not items:
        items = (Any,) * len(value)
    elif len(items) != len(value):
        raise ConfigError(f"{path}: expected {describe(tp)}, got {len(value)} items")
    return tuple(
        _convert(a, v, f"{path}[{i}]", renames)
        for i, (a, v) in enumerate(zip(items, value, strict=True))
    )


# ---------------------------------------------------------------------------------------------
# Unknown keys


@dataclasses.dataclass(frozen=True)
class _Renames:
    """What an unknown key may have meant: every dotted key of the root config, and the
    names another library uses for some of them."""

    keys: tuple[str, ...] = ()
    source: str = ""
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _dotted_keys(cls: type, prefix: str = "") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = f"{prefix}{f.name}"
        out.append(key)
        nested = [
            a for a in (hints[f.name], *(_union_args(hints[f.name]) or ())) if _is_dataclass_type(a)
        ]
        for sub in nested[:1]:
            out.extend(_dotted_keys(sub, key + "."))
    return out


def _renames_for(cls: type) -> _Renames:
    source, names = _RENAMES.get(cls, ("", {}))
    return _Renames(tuple(_dotted_keys(cls)), source, names)


def _hint(key: str, path: str, known: Iterable[str], renames: _Renames) -> str | None:
    """What unknown ``key`` (in section ``path``) most likely meant, or None."""
    if key in renames.names:
        return f"{renames.source}'s name; use {renames.names[key]}"
    elsewhere = [k for k in renames.keys if k.rsplit(".", 1)[-1] == key]
    if elsewhere:
        return f"did you mean {' or '.join(elsewhere)}?"
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean {path + '.' if path else ''}{close[0]}?"
    return None


def _unknown_keys_error(cls: type, unknown: list[str], path: str, renames: _Renames) -> ConfigError:
    names = sorted(f.name for f in dataclasses.fields(cls) if f.init)
    where = f"{path}." if path else ""
    parts, unexplained = [], False
    for key in unknown:
        hint = _hint(key, path, names, renames)
        unexplained |= hint is None
        parts.append(f"{where}{key}" + (f" ({hint})" if hint else ""))
    message = f"unknown config key(s) {', '.join(parts)} for {cls.__name__}"
    if unexplained:
        message += f"; known keys: {', '.join(names)}"
    return ConfigError(message)


# ---------------------------------------------------------------------------------------------
# Dicts and YAML to dataclasses


def from_dict(cls: type[T], data: dict[str, Any], *, path: str = "") -> T:
    """Builds dataclass ``cls`` from ``data``, recursing into nested dataclass fields.

    Every value is checked against its field's type (see the module docstring).

    Raises:
      ConfigError: for a key ``cls`` does not declare (naming the dotted path and what it may
        have meant), or a value of the wrong type (naming the key, the value and the type
        expected). Validation errors from ``__post_init__`` are re-raised as ConfigError with
        the path prefixed.
    """
    return _from_dict(cls, data, path, _renames_for(cls))


def _from_dict(cls: type[T], data: Any, path: str, renames: _Renames) -> T:
    if not isinstance(data, dict):
        raise ConfigError(f"{path or cls.__name__}: expected {describe(cls)}, got {_show(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names, key=str)
    if unknown:
        raise _unknown_keys_error(cls, unknown, path, renames)
    kwargs = {
        k: _convert(hints[k], v, f"{path}.{k}" if path else k, renames) for k, v in data.items()
    }
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


def to_yaml(cfg: Any) -> str:
    """``cfg`` as YAML that :func:`load_yaml` reads back to an equal config (keys in field
    order)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


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
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError:
            node[parts[-1]] = raw  # `a=b: c` is the string "b: c"; the type check judges it
    return out


def load_data(
    cls: type[T], data: dict[str, Any], source: str, overrides: list[str] | None = None
) -> T:
    """Builds ``cls`` from ``data`` (read from ``source``, a file) with ``overrides``.

    An error names what is wrong: the command-line overrides when ``data`` alone loads, else
    ``source``.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected {describe(cls)}, got {_show(data)}")
    try:
        return from_dict(cls, apply_overrides(data, overrides or []))
    except ConfigError as e:
        err = e
    if overrides:
        try:
            from_dict(cls, data)
        except ConfigError:
            pass
        else:
            raise ConfigError(f"command-line override ({' '.join(overrides)}): {err}") from err
    raise ConfigError(f"{source}: {err}") from err


def load_yaml(cls: type[T], path: str | Path, overrides: list[str] | None = None) -> T:
    """Loads YAML file ``path`` (or a bundled config's name, :func:`resolve_config`) into
    dataclass ``cls``, then applies ``overrides``.

    Errors name the file, or the command-line overrides when the file alone loads.
    """
    path = resolve_config(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    return load_data(cls, data, str(path), overrides)


# ---------------------------------------------------------------------------------------------
# Bundled configs


def bundled_configs() -> dict[str, Path]:
    """The configs shipped in the package, by name (file stem), sorted."""
    return {p.stem: p for p in sorted(BUNDLED_CONFIG_DIR.glob("*.yaml"))}


def resolve_config(name_or_path: str | Path) -> Path:
    """The YAML file meant by ``name_or_path``: an existing file, else a bundled config's
    name (``cpu_reference`` or ``cpu_reference.yaml``).

    Raises:
      ConfigError: neither; the message lists the bundled configs (and the near one).
    """
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    bundled = bundled_configs()
    text = str(name_or_path)
    stem = text[: -len(".yaml")] if text.endswith(".yaml") else text
    if "/" not in text and stem in bundled:
        return bundled[stem]
    if "/" in text or path.suffix:
        raise ConfigError(f"config file not found: {path}")
    near = difflib.get_close_matches(stem, list(bundled), n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise ConfigError(
        f"no config file or bundled config named {text!r}; {hint}"
        f"bundled: {', '.join(bundled) or 'none'} (`coevo configs` lists them)"
    )


def config_description(path: str | Path, width: int = 100) -> str:
    """The first sentence of the comment block at the top of YAML file ``path``, cut to
    ``width`` characters; ``""`` when the file opens with no comment."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text:
            break
        lines.append(text)
    first = re.split(r"(?<=[.!?])\s", " ".join(lines), maxsplit=1)[0]
    if len(first) > width:
        first = first[: width - 1].rsplit(" ", 1)[0] + "…"
    return first


def read_saved_config(path: str | Path) -> Any:
    """The JSON a run saved as its ``config.json`` at ``path``.

    Raises:
      ConfigError: the file is not JSON (the run's saved config is damaged), naming it.
    """
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e}); the run's saved config is damaged") from e
