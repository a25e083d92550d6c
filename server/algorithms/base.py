"""What every estimator shares: hyperparameter declarations, get/set_params, clone.

The estimators are the public face of the algorithms (scikit-learn's shape):
hyperparameters go to ``__init__``, which only stores them; ``fit(federation,
public_source=None)`` validates them, calls the solver function of
``privadapt.server.algorithms`` by keyword and keeps what it returned in
attributes ending in ``_``. Each hyperparameter is declared once, as a class
attribute in the style of a dataclass field::

    class NoisyGD(PrivateEstimator):
        epsilon: float = hyperparameter(EPSILON)
        calibration: str = hyperparameter(CALIBRATION, default="accountant")

(name, type, valid values from the small constraint vocabulary here, and the
default; none: required). Everything else is derived from that declaration:
the keyword-only ``__init__``, ``_parameter_constraints`` (one list of
alternatives per parameter, as scikit-learn's), ``get_params`` /
``set_params`` / ``clone``, ``parameter_defaults`` and the networked job's
hyperparameter schema (``server/jobs/catalog.py``). A subclass inherits its
bases' declarations (a mixin's too) and may declare a name again to change it.

Validation runs once per fit, at its start (``fit_context``), and not again
for the estimators a fit builds from values it validated (scikit-learn's
``_fit_context``): a selection's candidates, an auto radius's clones.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import math
import numbers
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

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


class _Required:
    """The default of a hyperparameter that has none."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter's declaration: its constraints and its default
    (``REQUIRED``: none). Its name is the class attribute it is assigned to."""

    constraints: Constraints
    default: Any = REQUIRED


def hyperparameter(constraints: Constraints, *, default: Any = REQUIRED) -> Any:
    """Declare a hyperparameter (module docstring); typed ``Any`` so that the
    class attribute can carry the parameter's own annotation."""
    return Hyperparameter(constraints, default)


# Whether the fit running in this thread was handed validated parameters
# (scikit-learn's skip_parameter_validation), so its own check is skipped.
_validation = threading.local()


@contextlib.contextmanager
def _skipping_validation(skip: bool) -> Iterator[None]:
    before = getattr(_validation, "skip", False)
    _validation.skip = skip
    try:
        yield
    finally:
        _validation.skip = before


def parameters_validated() -> contextlib.AbstractContextManager[None]:
    """Within it, ``fit`` does not validate its parameters again: for a
    caller that has validated them itself (a job launch checks them once,
    before its dry run and its run)."""
    return _skipping_validation(True)


Fit = TypeVar("Fit", bound=Callable[..., Any])


def fit_context(*, prefer_skip_nested_validation: bool) -> Callable[[Fit], Fit]:
    """Decorate ``fit``: validate the parameters first (unless the caller
    validated them, :func:`parameters_validated`), then fit. With
    ``prefer_skip_nested_validation`` the estimators the fit builds and fits
    are not validated again: it built them from values it validated (a
    selection's candidates at their budget shares, an auto radius's clones).
    Without it (a user-given estimator inside, PrivateGridSearch's learner)
    they validate their own."""
    def decorate(fit: Fit) -> Fit:
        @functools.wraps(fit)
        def validated_fit(self: PrivateEstimator, *args: Any, **kwargs: Any) -> Any:
            skip = getattr(_validation, "skip", False)
            if not skip:
                self._validate_params()
            with _skipping_validation(skip or prefer_skip_nested_validation):
                return fit(self, *args, **kwargs)
        return validated_fit  # type: ignore[return-value]
    return decorate


class PrivateEstimator:
    """Base of every estimator: hyperparameters declared as class attributes
    (module docstring), stored by the derived ``__init__``, checked against
    their constraints at ``fit``."""

    _hyperparameters: ClassVar[dict[str, Hyperparameter]] = {}
    _parameter_constraints: ClassVar[dict[str, Constraints]] = {}
    # Whether fit needs the public source sample (a job then needs the coordinator's).
    requires_public_source: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            raise TypeError(f"{cls.__name__}: declare each hyperparameter as a class attribute "
                            "(name: type = hyperparameter(...)); __init__ is derived from them")
        declared = _declarations(cls)
        for name, declaration in declared.items():
            # A default outside its own constraints would fail every fit that keeps it.
            default = declaration.default
            if default is not REQUIRED and not satisfies(default, declaration.constraints):
                raise TypeError(f"{cls.__name__}: the default {default!r} of {name!r} is not "
                                f"{describe(declaration.constraints)}")
        cls._hyperparameters = declared
        cls._parameter_constraints = {name: d.constraints for name, d in declared.items()}
        cls.__init__ = _derived_init(cls)  # type: ignore[method-assign]

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The hyperparameters, in declaration order (bases' first)."""
        return list(cls._hyperparameters)

    @classmethod
    def parameter_defaults(cls) -> dict[str, Any]:
        """Each hyperparameter's default; those without one are required."""
        return {name: declaration.default for name, declaration in cls._hyperparameters.items()
                if declaration.default is not REQUIRED}

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

    def _validate_params(self, checked: Mapping[str, Constraints] | None = None) -> None:
        """InvalidParameterError naming the first hyperparameter outside its
        constraints and what it must be, then :meth:`_check_together`.
        ``checked``: name -> constraints its value was already found to
        satisfy where it came from (a job file's checks); a name whose
        declared alternatives include every one of them is not checked again."""
        checked = checked or {}
        for name, constraints in self._parameter_constraints.items():
            if name in checked and all(c in constraints for c in checked[name]):
                continue
            value = getattr(self, name)
            if not satisfies(value, constraints):
                raise InvalidParameterError(
                    f"{type(self).__name__}: parameter {name!r} must be "
                    f"{describe(constraints)}; got {value!r}")
        self._check_together()

    def _check_together(self) -> None:
        """The checks spanning several parameters (InvalidParameterError);
        a subclass adds its own. The one every estimator shares: delta = 0 is
        pure epsilon-DP, which no Gaussian release meets; only the noise-free
        run may say it."""
        epsilon, delta = getattr(self, "epsilon", None), getattr(self, "delta", None)
        if delta == 0 and epsilon is not None and math.isfinite(epsilon):
            raise InvalidParameterError(
                f"{type(self).__name__}: parameter 'delta' must be > 0 when epsilon is finite "
                f"(delta = 0 only with epsilon = inf, the noise-free version); got {delta!r}")

    def needs_public_source(self) -> bool:
        """Whether this fit, with these hyperparameters, needs the public
        source: ``requires_public_source``, or a setting that reads it (a job
        then gets the coordinator's sample)."""
        return type(self).requires_public_source

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


def _declarations(cls: type[PrivateEstimator]) -> dict[str, Hyperparameter]:
    """Every hyperparameter ``cls`` declares or inherits, in order: its
    estimator bases' first, then its mixins' (an auto radius's search
    settings); each name's declaration is the most derived one."""
    ancestors = list(reversed(cls.__mro__))
    in_order = ([k for k in ancestors if issubclass(k, PrivateEstimator)]
                + [k for k in ancestors if not issubclass(k, PrivateEstimator)])
    names = dict.fromkeys(name for klass in in_order for name, value in vars(klass).items()
                          if isinstance(value, Hyperparameter))
    return {name: next(vars(k)[name] for k in cls.__mro__
                       if isinstance(vars(k).get(name), Hyperparameter)) for name in names}


def _derived_init(cls: type[PrivateEstimator]) -> Callable[..., None]:
    """The keyword-only ``__init__`` of ``cls``'s declarations: it only stores."""
    annotations: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        annotations.update(vars(klass).get("__annotations__", {}))
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                          default=(inspect.Parameter.empty if d.default is REQUIRED
                                   else d.default),
                          annotation=annotations.get(name, inspect.Parameter.empty))
        for name, d in cls._hyperparameters.items()]
    signature = inspect.Signature(parameters)

    def init(self: PrivateEstimator, **params: Any) -> None:
        try:
            bound = signature.bind(self, **params)
        except TypeError as err:
            raise TypeError(f"{cls.__name__}(): {err}") from None
        bound.apply_defaults()
        for name in cls._hyperparameters:
            setattr(self, name, bound.arguments[name])

    init.__name__ = "__init__"
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__signature__ = signature  # type: ignore[attr-defined]
    return init


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
CALIBRATIONS = ("accountant", "paper")  # the accountant's noise, or the paper's closed form
CALIBRATION = [Options(*CALIBRATIONS)]
# The share of each site's records that validates (common/data/record_parts.py).
VALIDATION_FRACTION = [Interval(float, *VALIDATION_FRACTION_RANGE, closed="both")]

# Hyperparameters several estimators take with one meaning, range and default.
CALIBRATION_PARAMETER = hyperparameter(CALIBRATION, default="accountant")
VALIDATION_FRACTION_PARAMETER = hyperparameter(VALIDATION_FRACTION, default=0.25)
