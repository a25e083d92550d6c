"""One calibration entry point: every algorithm's noise comes from
noise_multiplier (or noise_scale) and is, bit for bit, the noise it had
before (noise_at_start.json, computed at the commit before the entry point)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privadapt.common.accounting.calibration import (
    PAPER_CLOSED_FORMS,
    ReleasePlan,
    calibrate_noise_multiplier,
    noise_multiplier,
    noise_scale,
)
from privadapt.common.kernels.linear_gradient import LinearGradientParams
from privadapt.common.kernels.validation_loss import ValidationLossParams
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    mechanism_to_dict,
)
from privadapt.server.algorithms.discrepancy import private_discrepancy
from privadapt.server.algorithms.discrepancy_minimization import (
    noisy_minimization,
    unlabeled_adaptation,
)
from privadapt.server.algorithms.frank_wolfe import dp_frank_wolfe
from privadapt.server.algorithms.gradient_descent import noisy_gd, noisy_sgd
from privadapt.server.algorithms.model_selection import private_selection
from privadapt.server.algorithms.reweighting import descent

PINNED = json.loads((Path(__file__).parent / "noise_at_start.json").read_text())
SETTINGS = {"1.0-1e-05-10": (1.0, 1e-5, 10), "0.3-1e-06-50": (0.3, 1e-6, 50)}
ALGORITHMS = sorted(PINNED)


def _points() -> np.ndarray:
    points = np.random.default_rng(0).normal(size=(6, 3))
    return points / (2 * np.linalg.norm(points, axis=1, keepdims=True).max())


def _frank_wolfe(route: str, calibration_: str, epsilon: float, delta: float, iterations: int,
                 after_pilot: bool) -> object:
    spent = ()
    if after_pilot:
        pilot = dp_frank_wolfe.plan_queries(
            route="selection", dim=4, radius=2.0, clip_norm=0.5, epsilon=epsilon / 4,
            delta=delta, iterations=3, calibration="accountant", num_records=500)
        spent = (pilot.mechanism,) * 3
    return dp_frank_wolfe.plan_queries(
        route=route, dim=4, radius=2.0, clip_norm=0.5, epsilon=epsilon, delta=delta,
        iterations=iterations, calibration=calibration_, num_records=500,
        already_spent=spent).mechanism


def _noise(algorithm: str, calibration_: str, epsilon: float, delta: float, iterations: int):
    """What the algorithm's solver calibrates, as the pins recorded it."""
    params = noisy_minimization.gradient_params(_points(), np.full(6, 1 / 6), feature_norm=1.0,
                                                mu=2.0, regularization=0.0)
    bounds = descent.DataBounds(1.0, 1.0, 2.0)
    return {
        "noisy_gd": lambda: noisy_gd.gradient_mechanism(
            epsilon, delta, iterations, 1.5, calibration_, dim=4),
        "reweighting": lambda: descent.plan_noise(
            epsilon, delta, iterations, bounds, "squared", calibration_, 2.0, dim=3).mechanism,
        "reweighting_z": lambda: descent.plan_noise(
            epsilon, delta, iterations, bounds, "squared", calibration_, 2.0,
            dim=3).noise_multiplier,
        "noisy_minimization_fw": lambda: noisy_minimization.frank_wolfe_mechanism(
            params, epsilon=epsilon, delta=delta, iterations=iterations,
            calibration=calibration_),
        "noisy_minimization_md": lambda: noisy_minimization.mirror_descent_mechanism(
            params, epsilon=epsilon, delta=delta, iterations=iterations,
            calibration=calibration_),
        "dp_frank_wolfe_selection": lambda: _frank_wolfe(
            "selection", calibration_, epsilon, delta, iterations, False),
        "dp_frank_wolfe_secure_sum": lambda: _frank_wolfe(
            "secure_sum", calibration_, epsilon, delta, iterations, False),
        "dp_frank_wolfe_selection_after_pilot": lambda: _frank_wolfe(
            "selection", calibration_, epsilon, delta, iterations, True),
        "dp_frank_wolfe_secure_sum_after_pilot": lambda: _frank_wolfe(
            "secure_sum", calibration_, epsilon, delta, iterations, True),
        "unlabeled_adaptation": lambda: unlabeled_adaptation.moment_mechanism(
            epsilon, delta, 3, 1.0),
        "private_discrepancy": lambda: private_discrepancy.moments_mechanism(
            epsilon, delta, 3, 1.0, 1.0),
        "private_selection": lambda: private_selection.selection_mechanism(
            ValidationLossParams(np.zeros((3, 2)), "squared", 1.0), epsilon, delta, dim=2),
        # Inline in their solvers: the plans those solvers build.
        "private_grid_search": lambda: noise_multiplier(epsilon / 2, delta / 2,
                                                        ReleasePlan(iterations)),
        "perturbed_erm": lambda: noise_multiplier(epsilon, delta, ReleasePlan(1)),
        "noisy_sgd_count": lambda: noisy_sgd._count_mechanism(epsilon, delta, 0.1, 3),
        "noisy_sgd_step": lambda: noisy_sgd._step_mechanism(
            epsilon, delta, iterations, LinearGradientParams(np.zeros(3), "squared", 1.0),
            0.05, (noisy_sgd._count_mechanism(epsilon, delta, 0.1, 3),)),
    }[algorithm]()


def _as_pinned(value: object) -> object:
    return repr(value) if isinstance(value, float) else mechanism_to_dict(value)


@pytest.mark.parametrize("key", ALGORITHMS)
def test_every_algorithm_calibrates_the_noise_it_did_before(key):
    algorithm, calibration_, setting = key.split("/")
    if algorithm == "noisy_sgd_step":
        epsilon, delta, iterations = 1.0, 1e-5, 20
    else:
        epsilon, delta, iterations = SETTINGS[setting]
    assert _as_pinned(_noise(algorithm, calibration_, epsilon, delta, iterations)) == PINNED[key]


def test_each_paper_closed_form_is_registered_beside_its_algorithm():
    assert set(PAPER_CLOSED_FORMS) == {"noisy_gd", "reweighting", "noisy_frank_wolfe",
                                       "noisy_mirror_descent", "dp_frank_wolfe_selection"}
    for form in PAPER_CLOSED_FORMS.values():
        assert form.__module__.startswith("privadapt.server.algorithms.")


def test_the_accountant_calibration_is_the_search_it_routes_to():
    plan = ReleasePlan(5, lambda z: LaplaceMechanism(1.0, z), adjacency=Adjacency.REPLACE_ONE)
    assert noise_multiplier(1.0, 1e-6, plan) == calibrate_noise_multiplier(
        1.0, 1e-6, 5, lambda z: LaplaceMechanism(1.0, z))


def test_epsilon_inf_needs_no_noise_whatever_the_calibration():
    assert noise_multiplier(math.inf, 1e-5, ReleasePlan(3)) == math.inf
    assert noise_multiplier(math.inf, 1e-5, ReleasePlan(3), calibration="paper") == math.inf


def test_an_unknown_calibration_or_a_missing_paper_form_is_refused():
    with pytest.raises(ValueError, match="calibration must be one of"):
        noise_multiplier(1.0, 1e-5, ReleasePlan(3), calibration="exact")
    with pytest.raises(ValueError, match="no closed form in its paper"):
        noise_multiplier(1.0, 1e-5, ReleasePlan(3), calibration="paper")


def test_a_scale_plan_scales_the_accountant_multiplier_and_keeps_the_papers_scale():
    plan = ReleasePlan(4, paper=lambda epsilon, delta, count: 7.5)
    multiplier = noise_multiplier(1.0, 1e-5, plan)
    assert noise_scale(1.0, 1e-5, plan, 3.0) == 3.0 * multiplier
    assert noise_scale(1.0, 1e-5, plan, 3.0, calibration="paper") == 7.5


def _counted_gaussian(z: float):
    _counted_gaussian.calls += 1
    return GaussianMechanism.single(1.0, z)


def test_a_reused_plan_is_searched_once():
    _counted_gaussian.calls = 0
    plan = ReleasePlan(7, _counted_gaussian, reuse=True)
    first = noise_multiplier(0.9, 1e-6, plan)
    searched = _counted_gaussian.calls
    again = noise_multiplier(0.9, 1e-6, ReleasePlan(7, _counted_gaussian, reuse=True,
                                                    paper=lambda *_: 1.0))
    assert searched > 0 and again == first and _counted_gaussian.calls == searched


def test_no_algorithm_calibrates_around_the_entry_point():
    algorithms = Path(descent.__file__).parents[1]
    direct = [path.name for path in algorithms.rglob("*.py")
              if "calibrate_noise_multiplier(" in path.read_text(encoding="utf-8")]
    assert direct == []
