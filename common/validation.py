"""The checks every edge of privadapt uses on numbers it is handed.

Kernel parameters arriving at a site, an algorithm's hyperparameters and a
config value all need the same few answers ("a finite number > 0", "an integer
>= 1", "a probability"), and an operator should read the same sentence for the
same mistake wherever it is made. Each check returns the value normalised
(``float``, ``int``, ``bool`` or a float64 array) so a caller can validate and
store in one line, and raises ``ValueError`` naming ``name`` and what was
expected. Booleans are never numbers here: ``True`` is a mistake, not 1.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np


def check_number(name: str, value: Any) -> float:
    """Any real number (inf and NaN included), as a float."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def check_finite(name: str, value: Any) -> float:
    """A finite real number."""
    number = check_number(name, value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return number


def check_positive_finite(name: str, value: Any) -> float:
    """A finite number > 0 (a clip bound, a step size)."""
    number = check_number(name, value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return number


def check_nonnegative_finite(name: str, value: Any) -> float:
    """A finite number >= 0 (a penalty weight)."""
    number = check_number(name, value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return number


def check_positive(name: str, value: Any, *, infinity_means: str = "") -> float:
    """A number > 0, infinity allowed (epsilon = inf: the non-private run).
    ``infinity_means`` is said in the message, e.g. "inf for no noise"."""
    hint = f" ({infinity_means})" if infinity_means else ""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real) \
            or not value > 0:
        raise ValueError(f"{name} must be a number > 0{hint}, got {value!r}")
    return float(value)


def check_int_at_least(name: str, value: Any, low: int) -> int:
    """An integer (not a float, not a bool) >= ``low``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral) \
            or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_probability(
    name: str, value: Any, *, allow_zero: bool = False, allow_one: bool = False
) -> float:
    """A number in (0, 1), with either end included on request (alpha in [0, 1),
    a sampling rate in (0, 1])."""
    number = check_number(name, value)
    above = number >= 0 if allow_zero else number > 0
    below = number <= 1 if allow_one else number < 1
    if not (above and below):
        interval = f"{'[' if allow_zero else '('}0, 1{']' if allow_one else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return number


def check_one_of(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """One of ``allowed`` (compared with ==, never by truthiness)."""
    if not any(isinstance(value, type(option)) and value == option for option in allowed):
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """True or False (numpy's bool too), never a number standing in for one."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def check_finite_array(name: str, value: Any, shape: tuple[int | None, ...]) -> np.ndarray:
    """A float64 copy of ``value`` of ``shape`` (``None``: a dimension of any
    length) with finite entries."""
    shown = "(" + ", ".join("*" if n is None else str(n) for n in shape) \
        + ("," if len(shape) == 1 else "") + ")"
    try:
        array = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of shape {shown}, got {value!r}") from None
    if array.ndim != len(shape) or any(
        want is not None and want != got for want, got in zip(shape, array.shape, strict=True)
    ):
        raise ValueError(f"{name} must have shape {shown}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds NaN or infinite values")
    return array
