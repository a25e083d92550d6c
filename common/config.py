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
