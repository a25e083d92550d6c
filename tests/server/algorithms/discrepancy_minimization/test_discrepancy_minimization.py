"""Seed 003's federated route: one release of M_0, then two-stage FW / MD or
single-stage FW at the coordinator; noise off reaches the non-private optimum,
every ledger holds exactly the one planned release."""

import math

import numpy as np
import pytest
from scipy import optimize

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.discrepancy_minimization.estimators import (
    PrivateDiscrepancyMinimization,
)
from privadapt.server.algorithms.discrepancy_minimization.pnorm_mirror_descent import (
    mirror_exponent,
    mirror_step,
    potential_gradient,
)
from privadapt.server.algorithms.discrepancy_minimization.single_stage_frank_wolfe import (
    corollary2_step_size,
    single_stage_frank_wolfe,
)
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    frank_wolfe,
    second_moment,
)
from privadapt.server.algorithms.discrepancy_minimization.unlabeled_adaptation import (
    federated_adaptation,
    weighted_ridge,
)
from privadapt.server.jobs.catalog import ALGORITHMS

FEATURE_NORM, MU, LAMBDA, RADIUS = 1.5, 20.0, 1e-3, 1.0
DIM = 3


def sample(num, centre, seed):
    rng = np.random.default_rng(seed)
    features = clip_rows_to_norm(centre + 0.3 * rng.normal(size=(num, DIM)), FEATURE_NORM)
    return features, features.sum(axis=1) / math.sqrt(DIM)


SOURCE = (np.vstack([sample(20, -0.4, 1)[0], sample(40, 0.4, 2)[0]]),
          np.concatenate([sample(20, -0.4, 1)[1], sample(40, 0.4, 2)[1]]))
TARGET = sample(300, -0.4, 3)[0]


def target_federation(epsilon_cap, num_sites=3, seed=0):
    parts = np.array_split(TARGET, num_sites)
    datasets = [Dataset(part, np.zeros(len(part)), tuple(f"x{i}" for i in range(DIM)))
                for part in parts]
    return LocalFederation.from_datasets(
        datasets, epsilon_cap=epsilon_cap, delta_cap=1e-5, noise_seed=seed,
        allow_non_private=math.isinf(epsilon_cap))


def fit(method, epsilon=math.inf, delta=None, federation=None, iterations=300):
    federation = federation or target_federation(math.inf if math.isinf(epsilon) else 10.0)
    return federated_adaptation(
        federation, *SOURCE, epsilon=epsilon, delta=delta, feature_norm=FEATURE_NORM,
        method=method, mu=MU, regularization=LAMBDA, radius=RADIUS, ridge=1e-3,
        iterations=iterations)


def exact_objective(regularization=LAMBDA):
    return SmoothedDiscrepancy(SOURCE[0], second_moment(TARGET), MU, regularization)


def test_two_stage_fw_without_noise_reaches_the_non_private_optimum():
    result = fit("two_stage_fw")
    objective = exact_objective()
    best = frank_wolfe(objective, iterations=2000, tolerance=1e-12, away_steps=True)
    assert objective.value(result.weights) == pytest.approx(best.value, abs=1e-6)
    assert result.target_moment.noise_std == 0
    np.testing.assert_allclose(result.coef, weighted_ridge(*SOURCE, result.weights, 1e-3))


def test_two_stage_md_without_noise_approaches_the_non_private_optimum():
    result = fit("two_stage_md", iterations=2000)
    objective = exact_objective()
    best = frank_wolfe(objective, iterations=2000, tolerance=1e-12, away_steps=True)
    uniform = objective.value(np.full(60, 1 / 60))
    gain = uniform - best.value
    assert objective.value(result.weights) - best.value < 0.05 * gain


def test_single_stage_fw_without_noise_is_alg1_on_the_exact_moment():
    result = fit("single_stage_fw")
    direct = single_stage_frank_wolfe(exact_objective(0.0), SOURCE[1], radius=RADIUS,
                                      iterations=300)
    np.testing.assert_allclose(result.weights, direct.weights, atol=1e-8)
    np.testing.assert_allclose(result.coef, direct.coef, atol=1e-8)
    assert np.linalg.norm(result.coef) <= RADIUS + 1e-12


def test_single_stage_default_step_is_corollary2s_from_public_quantities():
    features, labels = SOURCE
    r_hat = max(np.linalg.norm(features, axis=1))
    label_range = labels.max() - labels.min()
    eta = math.sqrt(2) * (RADIUS * r_hat + label_range) / (
        RADIUS * r_hat * math.sqrt((1 + 2 * MU * r_hat**2) * 300))
    assert corollary2_step_size(features, labels, radius=RADIUS, mu=MU,
                                iterations=300) == pytest.approx(eta, rel=1e-12)
    default = single_stage_frank_wolfe(exact_objective(0.0), labels, radius=RADIUS,
                                       iterations=300)
    explicit = single_stage_frank_wolfe(exact_objective(0.0), labels, radius=RADIUS,
                                        iterations=300, step_size=eta)
    np.testing.assert_array_equal(default.weights, explicit.weights)
    np.testing.assert_array_equal(default.coef, explicit.coef)
    # Capped at 1 (tiny K), and 1 for an all-zero source.
    assert corollary2_step_size(features, labels, radius=RADIUS, mu=1e-3, iterations=1) == 1
    assert corollary2_step_size(np.zeros((4, DIM)), np.zeros(4), radius=RADIUS, mu=MU,
                                iterations=10) == 1


def test_single_stage_gap_estimate_shrinks():
    direct = single_stage_frank_wolfe(exact_objective(0.0), SOURCE[1], radius=RADIUS,
                                      iterations=400)
    assert direct.gap <= direct.gaps[0] / 10
    assert direct.gap == direct.gaps.min()


def test_every_site_charges_exactly_the_one_planned_release():
    federation = target_federation(2.0)
    result = fit("two_stage_fw", epsilon=1.0, delta=1e-5, federation=federation)
    assert set(result.privacy) == {"site-1", "site-2", "site-3"}
    for spent in result.privacy.values():
        assert len(spent.mechanisms) == 1
        assert spent.job.epsilon <= 1.0
        assert spent.job.epsilon == pytest.approx(1.0, rel=2e-3)
    assert result.target_moment.noise_std > 0


def test_estimator_fits_q_and_w_from_three_sites():
    estimator = PrivateDiscrepancyMinimization(
        epsilon=1.0, delta=1e-5, feature_norm=FEATURE_NORM, mu=MU, iterations=200)
    estimator.fit(target_federation(2.0), public_source=SOURCE)
    assert estimator.weights_.shape == (60,)
    assert estimator.weights_.sum() == pytest.approx(1.0)
    assert set(estimator.model_arrays()) == {"weights", "source_weights"}
    assert estimator.predict(SOURCE[0]).shape == (60,)


def test_estimator_refuses_a_finite_epsilon_without_delta():
    estimator = PrivateDiscrepancyMinimization(epsilon=1.0, feature_norm=FEATURE_NORM)
    with pytest.raises(ValueError, match="delta"):
        estimator.fit(target_federation(2.0), public_source=SOURCE)


def test_discrepancy_minimization_is_a_job_needing_the_public_source():
    assert ALGORITHMS["discrepancy_minimization"] is PrivateDiscrepancyMinimization
    assert PrivateDiscrepancyMinimization.requires_public_source


def test_mirror_step_solves_the_bregman_step():
    rng = np.random.default_rng(0)
    m = 7
    p = mirror_exponent(m)
    weights = rng.dirichlet(np.ones(m))
    gradient = rng.normal(size=m)
    step = 0.3

    def potential(q):
        return np.linalg.norm(q, ord=p) ** 2 / (p - 1)

    def bregman(q):
        return step * gradient @ q + potential(q) - potential(weights) \
            - potential_gradient(weights, p) @ (q - weights)

    reference = optimize.minimize(
        bregman, weights, method="SLSQP", bounds=[(0, 1)] * m,
        constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}], options={"ftol": 1e-14})
    ours = mirror_step(weights, gradient, step, p)
    assert ours.sum() == pytest.approx(1.0)
    assert bregman(ours) <= bregman(reference.x) + 1e-9


def test_a_job_runs_through_the_table_as_the_estimator_fits():
    from privadapt.common.proto import federation_pb2 as pb
    from privadapt.server.jobs.catalog import JobContext, run_job

    spec = pb.JobSpec(algorithm="discrepancy_minimization", epsilon=1.0, delta=1e-5)
    hyper = {"feature_norm": FEATURE_NORM, "mu": MU, "iterations": 50, "method": "two_stage_fw"}
    public = Dataset(SOURCE[0], SOURCE[1], tuple(f"x{i}" for i in range(DIM)))
    context = JobContext(target_federation(2.0, seed=5), spec, hyper, seed=0,
                         checkpoint=lambda step, model: None, public_source=public)
    model = run_job(context)
    expected = PrivateDiscrepancyMinimization(epsilon=1.0, delta=1e-5, **hyper).fit(
        target_federation(2.0, seed=5), public_source=SOURCE)
    np.testing.assert_array_equal(model["weights"], expected.coef_)
    np.testing.assert_array_equal(model["source_weights"], expected.weights_)


# Route (b): the paper's per-iteration algorithms at a single data holder.

from privadapt.server.algorithms.discrepancy_minimization.noisy_minimization import (  # noqa: E402
    noisy_frank_wolfe,
    noisy_mirror_descent,
)

SINGLE = {"feature_norm": FEATURE_NORM, "mu": MU, "regularization": LAMBDA}


def test_noisy_frank_wolfe_without_noise_is_open_loop_frank_wolfe():
    result = noisy_frank_wolfe(target_federation(math.inf, num_sites=1), SOURCE[0],
                               epsilon=math.inf, delta=None, iterations=1000,
                               calibration="accountant", **SINGLE)
    objective = exact_objective()
    best = frank_wolfe(objective, iterations=2000, tolerance=1e-12, away_steps=True)
    uniform = objective.value(np.full(60, 1 / 60))
    # Open-loop steps converge at O(1/K): within 2% of the gain after K = 1000.
    assert objective.value(result.weights) - best.value < 0.02 * (uniform - best.value)


def test_noisy_mirror_descent_without_noise_matches_the_coordinators():
    result = noisy_mirror_descent(target_federation(math.inf, num_sites=1), SOURCE[0],
                                  epsilon=math.inf, delta=None, iterations=100,
                                  calibration="accountant", **SINGLE)
    coordinator = fit("two_stage_md", federation=target_federation(math.inf, num_sites=1),
                      iterations=100)
    np.testing.assert_allclose(result.weights, coordinator.weights, atol=1e-6)


@pytest.mark.parametrize("algorithm", [noisy_frank_wolfe, noisy_mirror_descent])
def test_per_iteration_ledger_is_k_events_composing_to_epsilon(algorithm):
    federation = target_federation(3.0, num_sites=1)
    result = algorithm(federation, SOURCE[0], epsilon=1.0, delta=1e-5, iterations=20,
                       calibration="accountant", **SINGLE)
    (spent,) = result.privacy.values()
    assert len(spent.mechanisms) == 20
    assert spent.job.epsilon <= 1.0
    assert spent.job.epsilon == pytest.approx(1.0, rel=1e-2)


@pytest.mark.parametrize("algorithm", [noisy_frank_wolfe, noisy_mirror_descent])
def test_paper_calibration_spends_at_most_epsilon(algorithm):
    from privadapt.common.numerics.fixed_point import FixedPointCodec

    federation = target_federation(3.0, num_sites=1)
    federation.codec = FixedPointCodec(16)  # the paper's Alg. 3 noise is large: a coarse grid
    result = algorithm(federation, SOURCE[0], epsilon=1.0,
                       delta=1e-5, iterations=20, calibration="paper", **SINGLE)
    (spent,) = result.privacy.values()
    assert spent.job.epsilon <= 1.0


def test_per_iteration_route_refuses_several_sites():
    with pytest.raises(ValueError, match="one site"):
        noisy_frank_wolfe(target_federation(3.0), SOURCE[0], epsilon=1.0, delta=1e-5,
                          iterations=5, calibration="accountant", **SINGLE)


def test_estimator_single_holder_route():
    estimator = PrivateDiscrepancyMinimization(
        epsilon=1.0, delta=1e-5, feature_norm=FEATURE_NORM, mu=MU, iterations=10,
        route="single_holder")
    estimator.fit(target_federation(3.0, num_sites=1), public_source=SOURCE)
    assert estimator.target_moment_ is None
    assert estimator.weights_.sum() == pytest.approx(1.0)
    (spent,) = estimator.privacy_.values()
    assert len(spent.mechanisms) == 10
