"""What every estimator shares: parameter constraints, get/set_params, clone.

The estimators are the public face of the algorithms (scikit-learn's shape):
hyperparameters go to ``__init__``, which only stores them; ``fit(federation,
public_source=None)`` validates them, calls the solver function of
``privadapt.server.algorithms`` by keyword and keeps what it returned in
attributes ending in ``_``. Each class declares its hyperparameters' valid
values once, in ``_parameter_constraints`` (one list of alternatives per
``__init__`` argument, as scikit-learn's ``_parameter_constraints``), built
from the small vocabulary here. The same declaration feeds the networked
job table (``server/jobs/catalog.py``), which derives a job's hyperparameter
schema from it and from the ``__init__`` signature.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import (
    TRAIN,
    VALIDATION,
    VALIDATION_FRACTION_RANGE,
    RecordPart,
)
from privadapt.common.federation import Federation

# The value types a job's hyperparameter can carry over the wire (common/wire/messages.py).
WIRE_TYPES: tuple[type, ...] = (bool, int, float, str)


class InvalidParameterError(ValueError):
    """A hyperparameter outside its declared constraints (raised by ``fit``)."""


class NotFittedError(ValueError, AttributeError):
    """``predict``/``score`` before ``fit``."""


class Constraint:
    """One acceptable kind of value for a hyperparameter."""

    def is_satisfied_by(self, value: Any) -> bool:
        raise NotImplementedError

    @property
    def wire_types(self) -> tuple[type, ...]:
        """The job hyperparameter types this constraint admits (none: not a job field)."""
        raise NotImplementedError


class Interval(Constraint):
    """A number of ``kind`` (``int`` or ``float``; bools are refused) between
    ``left`` and ``right`` (either may be infinite), ends included as
    ``closed`` says: ``Interval(float, 0, math.inf, closed="right")`` is
    (0, inf], inf allowed. ``float`` admits ints too; NaN is never inside."""

    def __init__(
        self,
        kind: type[int] | type[float],
        left: float,
        right: float,
        *,
        closed: Literal["left", "right", "both", "neither"],
    ) -> None:
        if kind not in (int, float):
            raise TypeError(f"an interval's kind is int or float, got {kind!r}")
        self.kind, self.left, self.right, self.closed = kind, left, right, closed

    def is_satisfied_by(self, value: Any) -> bool:
        base = numbers.Integral if self.kind is int else numbers.Real
        if isinstance(value, bool | np.bool_) or not isinstance(value, base) or math.isnan(value):
            return False
        above = value > self.left or (value == self.left and self.closed in ("left", "both"))
        below = value < self.right or (value == self.right and self.closed in ("right", "both"))
        return above and below

    @property
    def wire_types(self) -> tuple[type, ...]:
        return (int,) if self.kind is int else (int, float)

    def __str__(self) -> str:
        opening = "[" if self.closed in ("left", "both") else "("
        closing = "]" if self.closed in ("right", "both") else ")"
        kind = "an int" if self.kind is int else "a number"
        return f"{kind} in {opening}{self.left:g}, {self.right:g}{closing}"


class Options(Constraint):
    """One of a fixed set of values (strings, usually)."""

    def __init__(self, *values: Any) -> None:
        self.values = values

    def is_satisfied_by(self, value: Any) -> bool:
        return any(type(value) is type(v) and value == v for v in self.values)

    @property
    def wire_types(self) -> tuple[type, ...]:
        return tuple(dict.fromkeys(t for t in map(type, self.values) if t in WIRE_TYPES))

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


class InstanceOf(Constraint):
    """An instance of one of ``types`` (``bool`` for a flag)."""

    def __init__(self, *types: type) -> None:
        self.types = types

    def is_satisfied_by(self, value: Any) -> bool:
        if bool not in self.types and isinstance(value, bool):
            return False
        return isinstance(value, self.types)

    @property
    def wire_types(self) -> tuple[type, ...]:
        return tuple(t for t in self.types if t in WIRE_TYPES)

    def __str__(self) -> str:
        return "an instance of " + " or ".join(t.__name__ for t in self.types)


# A constraint list may hold None: the parameter may then be None.
Constraints = Sequence[Constraint | None]


def satisfies(value: Any, constraints: Constraints) -> bool:
    return any(value is None if c is None else c.is_satisfied_by(value) for c in constraints)


def describe(constraints: Constraints) -> str:
    return " or ".join("None" if c is None else str(c) for c in constraints)


class PrivateEstimator:
    """Base of every estimator: hyperparameters stored by ``__init__`` as
    attributes of the same name, checked against ``_parameter_constraints``
    at ``fit``; ``get_params`` / ``set_params`` by signature introspection."""

    _parameter_constraints: ClassVar[dict[str, Constraints]] = {}
    # Whether fit needs the public source sample (a job then needs the coordinator's).
    requires_public_source: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The declaration and the signature must agree, or validation and the
        # job schema would silently miss a parameter: fail at import instead.
        if cls.__init__ is not PrivateEstimator.__init__:
            names, declared = set(cls._get_param_names()), set(cls._parameter_constraints)
            if names != declared:
                raise TypeError(f"{cls.__name__}: _parameter_constraints declares "
                                f"{sorted(declared)} but __init__ takes {sorted(names)}")

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The ``__init__`` keyword arguments, in signature order."""
        parameters = inspect.signature(cls.__init__).parameters.values()
        return [p.name for p in parameters
                if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]

    @classmethod
    def parameter_defaults(cls) -> dict[str, Any]:
        """Each hyperparameter's default; those without one are required."""
        signature = inspect.signature(cls.__init__).parameters
        return {name: signature[name].default for name in cls._get_param_names()
                if signature[name].default is not inspect.Parameter.empty}

    def get_params(self, deep: bool = False) -> dict[str, Any]:
        """The hyperparameters, as ``__init__`` takes them (``deep`` is accepted
        for scikit-learn compatibility; no estimator here nests another)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> PrivateEstimator:
        """Change hyperparameters (checked at the next ``fit``); returns self."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(f"{type(self).__name__} has no parameter {name!r}; "
                                            f"valid parameters: {valid}")
            setattr(self, name, value)
        return self

    def _validate_params(self) -> None:
        """InvalidParameterError naming the first hyperparameter outside its
        constraints and what it must be."""
        for name, constraints in self._parameter_constraints.items():
            value = getattr(self, name)
            if not satisfies(value, constraints):
                raise InvalidParameterError(
                    f"{type(self).__name__}: parameter {name!r} must be "
                    f"{describe(constraints)}; got {value!r}")
        # The one constraint spanning two parameters: delta = 0 is pure epsilon-DP,
        # which no Gaussian release meets; only the noise-free run may say it.
        epsilon, delta = getattr(self, "epsilon", None), getattr(self, "delta", None)
        if delta == 0 and epsilon is not None and math.isfinite(epsilon):
            raise InvalidParameterError(
                f"{type(self).__name__}: parameter 'delta' must be > 0 when epsilon is finite "
                f"(delta = 0 only with epsilon = inf, the noise-free version); got {delta!r}")

    def _check_is_fitted(self, attribute: str = "coef_") -> None:
        if not hasattr(self, attribute):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit first")

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The fitted model as named arrays (what a networked job stores)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        defaults = self.parameter_defaults()
        shown = [f"{name}={value!r}" for name, value in self.get_params().items()
                 if name not in defaults or not _same(value, defaults[name])]
        return f"{type(self).__name__}({', '.join(shown)})"


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a)
                                              and math.isnan(b)))


def clone(estimator: PrivateEstimator) -> PrivateEstimator:
    """A new, unfitted estimator with the same hyperparameters (deep-copied,
    so tuning one never changes the other): what a selection step fits."""
    params = {name: copy.deepcopy(value) for name, value in estimator.get_params().items()}
    return type(estimator)(**params)


PublicSource = Dataset | tuple[np.ndarray, np.ndarray]


def public_arrays(
    public_source: PublicSource | None, who: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """(features, labels) of a public source given as a Dataset or a pair."""
    if public_source is None:
        return None
    if isinstance(public_source, Dataset):
        return public_source.features, public_source.labels
    try:
        features, labels = public_source
    except (TypeError, ValueError):
        raise ValueError(f"{who}: public_source must be a Dataset or a (features, labels) pair, "
                         f"got {type(public_source).__name__}") from None
    return np.asarray(features, dtype=float), np.asarray(labels, dtype=float)


def require_public_arrays(
    public_source: PublicSource | None, who: str
) -> tuple[np.ndarray, np.ndarray]:
    arrays = public_arrays(public_source, who)
    if arrays is None:
        raise ValueError(f"{who} needs the public source sample: fit(federation, public_source)")
    return arrays


def feature_dim(federation: Federation, public_source: PublicSource | None, who: str) -> int:
    """d: the public source's number of features if given, else the
    federation's (its sites must agree on one)."""
    arrays = public_arrays(public_source, who)
    if arrays is None:
        return federation.dim
    features = arrays[0]
    if features.ndim != 2:
        raise ValueError(f"{who}: public features must be a 2-d array (m, d), "
                         f"got shape {features.shape}")
    return int(features.shape[1])


def record_parts(federation: Federation, validation_fraction: float,
                 name: str) -> tuple[Federation, Federation]:
    """The "train" and "validation" record parts of ``federation``'s sites,
    salted with its job id (seed 004's S1 and S2; ``InvalidParameterError``
    for a federation that cannot restrict its queries to a part)."""
    restrict = getattr(federation, "restricted_to", None)
    if restrict is None:
        raise InvalidParameterError(
            f"{name}: fit needs a federation whose sites split their records into parts "
            "(restricted_to), or a separate validation federation where the fit takes one: "
            "the selection's utility bound needs validation records the candidates were not "
            "trained on (seed 004's S2)")
    salt = federation.job_id
    return (restrict(RecordPart(TRAIN, validation_fraction, salt)),
            restrict(RecordPart(VALIDATION, validation_fraction, salt)))


# The constraints the estimators share, so one name means one range everywhere.
POSITIVE = [Interval(float, 0, math.inf, closed="neither")]  # finite and > 0
NON_NEGATIVE = [Interval(float, 0, math.inf, closed="left")]  # finite and >= 0
EPSILON = [Interval(float, 0, math.inf, closed="right")]  # inf: the non-private version
DELTA = [Interval(float, 0, 1, closed="left")]  # 0 only with epsilon = inf (checked at fit)
ITERATIONS = [Interval(int, 1, math.inf, closed="left")]
FLAG = [InstanceOf(bool)]
CALIBRATION = [Options("accountant", "paper")]
# The share of each site's records that validates (common/data/record_parts.py).
VALIDATION_FRACTION = [Interval(float, *VALIDATION_FRACTION_RANGE, closed="both")]
