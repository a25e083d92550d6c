"""The shared estimator machinery: constraints, get/set_params, clone, and the
declaration agreeing with every estimator's signature."""

import inspect
import math

import numpy as np
import pytest

from privadapt.server.algorithms.base import (
    InstanceOf,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    clone,
    describe,
    hyperparameter,
    satisfies,
)
from privadapt.server.algorithms.discrepancy.estimators import PrivateDiscrepancy
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD, NoisySGD
from privadapt.server.algorithms.model_selection.selection import PrivateSelection
from privadapt.server.algorithms.reweighting.descent import StepSizes
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap

# A valid set of hyperparameters for each estimator.
VALID = {
    NoisyGD: dict(loss="logistic", epsilon=1.0, delta=1e-6, iterations=5, learning_rate=1.0,
                  radius=5.0, clip_norm=1.0),
    NoisySGD: dict(loss="squared", epsilon=1.0, delta=1e-6, iterations=5,
                   expected_batch_size=10, learning_rate=1.0, radius=5.0, clip_norm=1.0),
    PCnvxAdap: dict(alpha=0.5, epsilon=1.0, delta=1e-6, iterations=5, feature_norm=1.0,
                    label_bound=1.0, radius=5.0),
    PNCnvxAdap: dict(alpha=0.5, epsilon=1.0, delta=1e-6, iterations=5, feature_norm=1.0,
                     label_bound=1.0, radius=5.0),
    PrivateDiscrepancy: dict(epsilon=1.0, delta=1e-6, radius=2.0, feature_norm=1.0,
                             label_bound=1.0),
    PrivateSelection: dict(candidates=[[0.0, 1.0], [1.0, 0.0]], epsilon=1.0, delta=1e-6,
                           loss_bound=2.0, loss="logistic"),
}
ESTIMATORS = list(VALID)


@pytest.mark.parametrize(
    ("constraint", "inside", "outside"),
    [
        (Interval(float, 0, math.inf, closed="neither"), [1e-9, 3, 2.5, np.float64(1.0)],
         [0, -1.0, math.inf, math.nan, True, "1", None]),
        (Interval(float, 0, math.inf, closed="right"), [math.inf, 0.1], [0.0, math.nan]),
        (Interval(float, 0, 1, closed="left"), [0.0, 0.5], [1.0, -0.1]),
        (Interval(int, 1, math.inf, closed="left"), [1, 10**9, np.int64(3)], [0, 1.0, True]),
        (Options("a", "b"), ["a", "b"], ["c", 1, None]),
        (InstanceOf(bool), [True, False], [1, 0, "true"]),
        (InstanceOf(StepSizes), [StepSizes(1.0, 1.0, 1.0)], ["paper", None]),
    ],
)
def test_constraint_vocabulary(constraint, inside, outside):
    assert all(constraint.is_satisfied_by(v) for v in inside)
    assert not any(constraint.is_satisfied_by(v) for v in outside)


def test_a_none_alternative_admits_none_and_is_described():
    constraints = [Interval(int, 0, math.inf, closed="left"), None]
    assert satisfies(None, constraints) and satisfies(3, constraints)
    assert not satisfies(-1, constraints)
    assert describe(constraints) == "an int in [0, inf) or None"


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_constraints_declare_exactly_the_signature(estimator):
    names = [p for p in inspect.signature(estimator.__init__).parameters if p != "self"]
    assert set(estimator._parameter_constraints) == set(names)
    assert all(p.kind == p.KEYWORD_ONLY
               for name, p in inspect.signature(estimator.__init__).parameters.items()
               if name != "self")


def test_a_hand_written_init_fails_at_class_creation():
    with pytest.raises(TypeError, match="__init__ is derived"):
        class Broken(PrivateEstimator):
            epsilon: float = hyperparameter([Interval(float, 0, 1, closed="both")])

            def __init__(self, *, epsilon, radius):
                self.epsilon, self.radius = epsilon, radius


def test_a_default_outside_its_constraints_fails_at_class_creation():
    with pytest.raises(TypeError, match=r"default 2.0 of 'epsilon' is not a number in \[0, 1\]"):
        class Broken(PrivateEstimator):
            epsilon: float = hyperparameter([Interval(float, 0, 1, closed="both")], default=2.0)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_get_set_params_and_clone_round_trip(estimator):
    model = estimator(**VALID[estimator])
    params = model.get_params()
    assert set(params) == set(estimator._parameter_constraints)
    assert {k: params[k] for k in VALID[estimator]} == VALID[estimator]
    assert model.set_params(epsilon=3.0) is model and model.epsilon == 3.0
    copy = clone(model)
    assert type(copy) is estimator and copy is not model
    assert copy.get_params() == model.get_params()
    assert estimator(**copy.get_params()).get_params() == params | {"epsilon": 3.0}
    copy.set_params(epsilon=0.5)
    assert model.epsilon == 3.0  # independent


def test_clone_drops_fitted_state_and_set_params_refuses_unknown_names():
    model = NoisyGD(**VALID[NoisyGD])
    model.coef_ = np.zeros(3)
    assert not hasattr(clone(model), "coef_")
    with pytest.raises(InvalidParameterError, match=r"no parameter 'step_size'.*learning_rate"):
        model.set_params(step_size=1.0)


def test_repr_shows_the_parameters_that_differ_from_their_defaults():
    model = PNCnvxAdap(**VALID[PNCnvxAdap], loss="squared")
    assert repr(model).startswith("PNCnvxAdap(alpha=0.5, ")
    assert "loss='squared'" in repr(model) and "mu=" not in repr(model)


def test_parameter_defaults_are_the_signatures():
    assert PNCnvxAdap.parameter_defaults()["mu"] == 100.0
    assert PCnvxAdap.parameter_defaults()["mu"] == math.inf
    assert "radius" not in NoisyGD.parameter_defaults()


@pytest.mark.parametrize(
    ("estimator", "name", "value", "expected"),
    [
        (NoisyGD, "loss", "hinge", "one of 'logistic', 'squared'"),
        (NoisyGD, "iterations", 0, r"an int in \[1, inf\)"),
        (NoisyGD, "iterations", 2.0, "an int"),
        (NoisyGD, "epsilon", 0.0, r"a number in \(0, inf\]"),
        (NoisyGD, "delta", 1.0, r"a number in \[0, 1\)"),
        (NoisyGD, "clip_norm", math.inf, r"\(0, inf\)"),
        (NoisyGD, "calibration", "tight", "'accountant', 'paper'"),
        (NoisySGD, "count_budget_fraction", 1.0, r"\(0, 1\)"),
        (NoisySGD, "num_records", 0.5, "or None"),
        (PCnvxAdap, "alpha", 1.0, r"\(0, 1\)"),
        (PCnvxAdap, "k2", -0.1, r"\[0, inf\)"),
        (PCnvxAdap, "weight_noise", 1, "bool"),
        (PCnvxAdap, "step_sizes", "fast", "StepSizes"),
        (PNCnvxAdap, "mu", math.inf, r"\(0, inf\)"),
        (PNCnvxAdap, "num_classes", 1, r"\[2, inf\)"),
        (PNCnvxAdap, "seed", -1, "or None"),
        (PrivateDiscrepancy, "method", "dca", "'federated', 'single_holder'"),
    ],
)
def test_a_bad_value_is_refused_at_fit_naming_the_argument(estimator, name, value, expected):
    model = estimator(**{**VALID[estimator], name: value})  # __init__ only stores
    assert getattr(model, name) == value or value != value
    with pytest.raises(InvalidParameterError, match=rf"{estimator.__name__}: parameter "
                                                    rf"'{name}' must be .*{expected}"):
        model.fit(None)  # refused before the federation is touched


def test_delta_zero_only_without_noise():
    with pytest.raises(InvalidParameterError, match="'delta' must be > 0 when epsilon is finite"):
        NoisyGD(**{**VALID[NoisyGD], "delta": 0.0}).fit(None)
    NoisyGD(**{**VALID[NoisyGD], "delta": 0.0, "epsilon": math.inf})._validate_params()
