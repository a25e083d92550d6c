"""The checks every edge of privadapt uses on numbers it is handed.

Kernel parameters arriving at a site, an algorithm's hyperparameters and a
config value all need the same few answers ("a finite number > 0", "an integer
>= 1", "a probability"), and an operator should read the same sentence for the
same mistake wherever it is made. Each check returns the value normalised
(``float``, ``int``, ``bool`` or a float64 array) so a caller can validate and
store in one line, and raises ``ValueError`` naming ``name`` and what was
expected. Booleans are never numbers here: ``True`` is a mistake, not 1.

:func:`frozen_value` is how a value class uses them: a frozen dataclass whose
``__post_init__`` validates its fields and may store them normalised, once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

_Class = TypeVar("_Class", bound=type)
# Instances (by id) whose __post_init__ is running, per thread: only they may
# assign their own fields.
_OPEN = threading.local()


def frozen_value(cls: _Class | None = None, /, **options: Any) -> Any:
    """Class decorator: ``@dataclass(frozen=True, **options)`` whose
    ``__post_init__`` may assign its own fields (``self.scale = float(self.scale)``)
    to store them validated and normalised; before it returns the instance is
    frozen like any frozen dataclass (``FrozenInstanceError`` on assignment).

    Why not ``object.__setattr__`` in every ``__post_init__``: the same
    effect written as the assignment it is. Equality, hashing, ``repr`` and
    ``dataclasses.replace`` are the dataclass's own, unchanged; only the one
    ``__post_init__`` call of a new instance may assign, and only to that
    instance (a value built inside it is frozen as usual)."""

    def wrap(klass: _Class) -> _Class:
        validate = klass.__dict__.get("__post_init__")
        if validate is not None:
            klass.__post_init__ = _opened(validate)  # type: ignore[attr-defined]
        klass = dataclasses.dataclass(frozen=True, **options)(klass)
        frozen_setattr = klass.__setattr__

        def assign(self: Any, name: str, value: Any) -> None:
            if id(self) in _open_ids():
                object.__setattr__(self, name, value)
            else:
                frozen_setattr(self, name, value)

        klass.__setattr__ = assign  # type: ignore[method-assign]
        klass.__reduce__ = _rebuilt_by_init  # type: ignore[method-assign]
        klass.__setstate__ = _validated_state  # type: ignore[attr-defined]
        return klass

    return wrap if cls is None else wrap(cls)


def _rebuilt_by_init(self: Any) -> tuple[Any, ...]:
    # Unpickling goes through __init__, and so through validation, like any
    # other construction (pickle's default would restore the fields unchecked).
    fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
    return _construct, (type(self), fields)


def _construct(cls: type, fields: dict[str, Any]) -> Any:
    return cls(**fields)


def _validated_state(self: Any, state: Any) -> None:
    # A pickle written by hand (NEWOBJ, then BUILD with a state) bypasses
    # __reduce__: its state is stored and then validated as __init__ would.
    fields, slots = state if isinstance(state, tuple) else (state, None)
    for name, value in {**(fields or {}), **(slots or {})}.items():
        object.__setattr__(self, name, value)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _open_ids() -> set[int]:
    ids = getattr(_OPEN, "ids", None)
    if ids is None:
        ids = _OPEN.ids = set()
    return ids


def _opened(validate: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(validate)
    def post_init(self: Any) -> None:
        ids = _open_ids()
        if id(self) in ids:  # a subclass's __post_init__ calling its parent's
            validate(self)
            return
        ids.add(id(self))
        try:
            validate(self)
        except dataclasses.FrozenInstanceError as error:
            # Only a subclass's own frozen __setattr__ (a plain dataclass)
            # refuses an assignment inside __post_init__.
            raise TypeError(f"{type(self).__name__} subclasses a frozen value: declare it "
                            "with @frozen_value, not @dataclass(frozen=True)") from error
        finally:
            ids.discard(id(self))

    return post_init


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
    array = _float_array(name, value, shape, copy=True)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds NaN or infinite values")
    return array


def check_array_shape(name: str, value: Any, shape: tuple[int | None, ...]) -> np.ndarray:
    """``value`` as a float64 array of ``shape``, refused in the words of
    :func:`check_finite_array`, but neither copied (when it is one already)
    nor checked finite: for a check that a constructor calling
    :func:`check_finite_array` follows (a kernel's ``from_wire`` and its
    ``Params``), so that a 1e5-float parameter is copied and scanned once."""
    return _float_array(name, value, shape, copy=None)


def _float_array(name: str, value: Any, shape: tuple[int | None, ...],
                 copy: bool | None) -> np.ndarray:
    shown = "(" + ", ".join("*" if n is None else str(n) for n in shape) \
        + ("," if len(shape) == 1 else "") + ")"
    try:
        array = np.array(value, dtype=np.float64, copy=copy)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of shape {shown}, got {value!r}") from None
    if array.ndim != len(shape) or any(
        want is not None and want != got for want, got in zip(shape, array.shape, strict=True)
    ):
        raise ValueError(f"{name} must have shape {shown}, got {array.shape}")
    return array
