"""Reading and writing configuration files (policies, schemas, daemon and job configs).

One reader so every TOML file a user points privadapt at fails the same way:
a ``ConfigError`` naming what the file is, its path and what went wrong. One
writer (:func:`render_toml`, over tomli-w) so every configuration object
renders itself (``to_toml``) as text its own loader reads back equal: tools
that set up a deployment write objects, not hand-made TOML.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import tomli_w

from privadapt.common.errors import ConfigError


def read_toml(path: str | Path, what: str, hint: str = "check the path") -> dict[str, Any]:
    """The parsed TOML document at ``path``; ``what`` names the file in errors
    (``"policy"`` -> "policy file PATH: not found; HINT")."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{what} file {path}: not found; {hint}") from None
    except OSError as err:
        raise ConfigError(f"{what} file {path}: cannot be read: {err.strerror or err}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{what} file {path}: not valid TOML: {err}") from None


Layout = dict[str, dict[str, tuple[type | tuple[type, ...], bool]]]
"""``{section: {key: (accepted types, required)}}`` of a configuration file."""


#: How an error names the types a key accepts.
_TYPE_NAMES = {bool: "true or false", int: "a whole number", float: "a number",
               str: "a string", list: "a list", dict: "a table"}


def type_text(accepted: type | tuple[type, ...]) -> str:
    """What a layout entry accepts, as its errors and the reference say it."""
    kinds = accepted if isinstance(accepted, tuple) else (accepted,)
    if set(kinds) == {int, float}:
        return "a number"
    return " or ".join(_TYPE_NAMES.get(kind, kind.__name__) for kind in kinds)


def suggest(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a mistyped one, or ""."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_sections(data: Mapping[str, Any], layout: Layout, source: str) -> dict[str, Any]:
    """Flatten ``[section] key = value`` tables into one dict, refusing unknown
    sections and keys (naming the closest known one), values of the wrong
    type, and missing required keys, each with a ``ConfigError`` naming
    ``source``, the section and the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a table of sections, got {data!r}")
    values: dict[str, Any] = {}
    for section, table in data.items():
        if section not in layout:
            raise ConfigError(f"{source}: unknown section [{section}]{suggest(section, layout)}; "
                              f"known sections: {', '.join(f'[{s}]' for s in layout)}")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{source}: [{section}] must be a table of keys")
        for key, value in table.items():
            if key not in layout[section]:
                raise ConfigError(f"{source}: unknown key [{section}] {key}"
                                  f"{suggest(key, layout[section])}; known keys in "
                                  f"[{section}]: {', '.join(layout[section])}")
            accepted, _ = layout[section][key]
            kinds = accepted if isinstance(accepted, tuple) else (accepted,)
            # bool is an int: `timeout = true` is a typo, not a number.
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
                raise ConfigError(f"{source}: [{section}] {key} must be {type_text(kinds)}, "
                                  f"got {value!r}")
            if isinstance(value, str) and not value:
                raise ConfigError(f"{source}: [{section}] {key} must not be empty")
            values[key] = value
    for section, keys in layout.items():
        for key, (_, required) in keys.items():
            if required and key not in values:
                raise ConfigError(f"{source}: missing required key [{section}] {key}")
    return values


def toml_text(document: Mapping[str, Any]) -> str:
    """``document`` as TOML text (tomli-w) that tomllib reads back equal: its
    strings, whole numbers, floats (``inf`` and ``nan`` included), booleans,
    arrays and tables; an enum is written as its value, a path as its text and
    a set as a sorted array. ``TypeError`` for any other value."""
    return tomli_w.dumps(_plain(document))


def render_toml(sections: Mapping[str, Mapping[str, Any]],
                relative_to: Path | None = None) -> str:
    """``[section] key = value`` text; keys whose value is None or "" are left
    out (the loader's default applies), and so are sections left empty.

    A path inside ``relative_to`` (the directory the file will be written in,
    which the loaders resolve relative paths against) is written relative to
    it, so the directory can be moved as a whole; other paths as they are
    (give absolute ones)."""
    document = {section: {key: _relative(value, relative_to) for key, value in table.items()
                          if value is not None and value != ""}
                for section, table in sections.items()}
    return toml_text({section: table for section, table in document.items() if table})


def render_layout(layout: Layout, record: object, relative_to: Path | None = None) -> str:
    """:func:`render_toml` of a configuration whose attributes carry the key
    names of ``layout`` (the one :func:`read_sections` reads it with)."""
    return render_toml({section: {key: getattr(record, key) for key in keys}
                        for section, keys in layout.items()}, relative_to)


def _relative(value: Any, base: Path | None) -> Any:
    if isinstance(value, Path) and base is not None and value.is_relative_to(base):
        return value.relative_to(base)
    return value


def _plain(value: Any) -> Any:
    """``value`` with the types tomli-w does not know turned into ones it does."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        value = sorted(value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
