"""Reading configuration files (policies, schemas, daemon and job configs).

One reader so every TOML file a user points privadapt at fails the same way:
a ``ConfigError`` naming what the file is, its path and what went wrong.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

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


def read_sections(data: dict[str, Any], layout: Layout, source: str) -> dict[str, Any]:
    """Flatten ``[section] key = value`` tables into one dict, refusing unknown
    sections and keys, values of the wrong type, and missing required keys,
    each with a ``ConfigError`` naming ``source``, the section and the key."""
    values: dict[str, Any] = {}
    for section, table in data.items():
        if section not in layout:
            raise ConfigError(f"{source}: unknown section [{section}]; known sections: "
                              f"{', '.join(f'[{s}]' for s in layout)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [{section}] must be a table of keys")
        for key, value in table.items():
            if key not in layout[section]:
                raise ConfigError(f"{source}: unknown key [{section}] {key}; known keys in "
                                  f"[{section}]: {', '.join(layout[section])}")
            accepted, _ = layout[section][key]
            kinds = accepted if isinstance(accepted, tuple) else (accepted,)
            # bool is an int: `timeout = true` is a typo, not a number.
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
                expected = " or ".join(k.__name__ for k in kinds)
                raise ConfigError(f"{source}: [{section}] {key} must be {expected}, "
                                  f"got {value!r}")
            if isinstance(value, str) and not value:
                raise ConfigError(f"{source}: [{section}] {key} must not be empty")
            values[key] = value
    for section, keys in layout.items():
        for key, (_, required) in keys.items():
            if required and key not in values:
                raise ConfigError(f"{source}: missing required key [{section}] {key}")
    return values
