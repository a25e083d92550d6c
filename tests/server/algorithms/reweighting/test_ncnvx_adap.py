"""PNCnvxAdap / NCnvxAdap (seed 000, Alg. 2) through the Federation protocol: it is
projected gradient descent on J, returns a uniformly drawn iterate reproducibly
from its seed, and every site's ledger charges exactly the planned epsilon."""

import math

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.server.algorithms.reweighting.descent import DataBounds, StepSizes
from privadapt.server.algorithms.reweighting.estimators import PNCnvxAdap
from privadapt.server.algorithms.reweighting.ncnvx_adap import (
    ncnvx_adap,
    pncnvx_adap,
    smoothness_bound,
)
from privadapt.server.algorithms.reweighting.objectives import (
    AdaptationSample,
    ReweightingHyperparameters,
    objective_value,
    reference_descent,
    weight_lower_bounds,
)

M, N, DIM = 60, 30, 4
BOUNDS = DataBounds(feature_norm=2.0, label_bound=1.0, radius=5.0)
HYPER = ReweightingHyperparameters(alpha=0.5, k1=0.05, k2=0.05, kinf=0.05, mu=100.0,
                                   discrepancy=0.01)


def shifted_classification(seed=2):
    rng = np.random.default_rng(seed)
    public = rng.normal(size=(M, DIM)) / 2
    private = rng.normal(size=(N, DIM)) / 2 + np.array([0.4, 0.0, -0.2, 0.1])

    def labels(x, truth):
        return np.where(x @ truth + 0.2 * rng.normal(size=len(x)) >= 0, 1.0, -1.0)

    return AdaptationSample(public, labels(public, np.array([1.0, 1.0, 0.0, -1.0])),
                            private, labels(private, np.array([1.0, 0.3, -1.0, -1.0])))


SAMPLE = shifted_classification()
LOWER = weight_lower_bounds(M, N, HYPER.alpha)
STEPS = StepSizes(2.0, 0.5 * LOWER[0] ** 3, 0.5 * LOWER[-1] ** 3)
# The settings PNCnvxAdap defaults, which the solver takes explicitly.
PLAN = {name: PNCnvxAdap.parameter_defaults()[name] for name in
        ("loss", "seed", "step_scale", "step_distance", "calibration", "aggregate_noise_ratio",
         "chain")}


def federation(tmp_path, epsilon_cap=math.inf, tag="f"):
    sites = []
    for k, part in enumerate((slice(0, 11), slice(11, N))):
        policy = SitePolicy(f"{tag}-{k}", epsilon_cap=epsilon_cap, delta_cap=1e-5,
                            allow_non_private=math.isinf(epsilon_cap))
        data = Dataset(SAMPLE.private_features[part], SAMPLE.private_labels[part],
                       tuple(f"x{i}" for i in range(DIM)))
        sites.append(Site(data, policy, PrivacyLedger(tmp_path / f"{tag}-{k}.db", policy,
                                                        create=True),
                          SeededRandomBits(k)))
    return LocalFederation(sites)


def run(fed, **options):
    options = {"step_sizes": STEPS, **PLAN, **options}
    return ncnvx_adap(fed, SAMPLE.public_features, SAMPLE.public_labels, hyper=HYPER,
                      bounds=BOUNDS, **options)


def reference(iterations):
    return reference_descent(SAMPLE, HYPER, objective="smooth", loss="logistic",
                             radius=BOUNDS.radius, iterations=iterations,
                             step_sizes=(STEPS.weights, STEPS.public_weights,
                                         STEPS.private_weights))


def test_ncnvx_adap_is_projected_gradient_descent_on_j(tmp_path):
    result = run(federation(tmp_path), iterations=40, return_average=True)
    iterates = reference(40)
    np.testing.assert_allclose(result.last_weights, iterates[-1][0], rtol=1e-7)
    np.testing.assert_allclose(result.weights, np.mean([w for w, _ in iterates], axis=0),
                               rtol=1e-7)


def test_ncnvx_adap_decreases_j_towards_a_stationary_point(tmp_path):
    iterates = reference(300)
    values = [objective_value(w, u, SAMPLE, HYPER, "smooth", "logistic") for w, u in iterates]
    start = objective_value(np.zeros(DIM), LOWER, SAMPLE, HYPER, "smooth", "logistic")
    assert values[-1] < 0.9 * start
    assert np.all(np.diff(values) <= 1e-12)  # descent: the steps are below 1/smoothness
    result = run(federation(tmp_path), iterations=300, return_average=False, seed=0)
    assert result.last_weights == pytest.approx(iterates[-1][0], rel=1e-6)


def test_returned_iterate_is_drawn_uniformly_and_reproducibly_from_the_seed(tmp_path):
    first = run(federation(tmp_path, tag="a"), iterations=30, seed=7)
    again = run(federation(tmp_path, tag="b"), iterations=30, seed=7)
    assert first.output_iteration == again.output_iteration
    np.testing.assert_array_equal(first.weights, again.weights)
    t_star = first.output_iteration
    assert 1 <= t_star <= 30
    np.testing.assert_allclose(first.weights, reference(t_star)[-1][0], rtol=1e-7)
    draws = {run(federation(tmp_path, tag=f"s{s}"), iterations=30, seed=s).output_iteration
             for s in range(8)}
    assert len(draws) > 1  # the seed drives the draw


def test_private_run_charges_the_planned_epsilon_at_every_site(tmp_path):
    result = pncnvx_adap(federation(tmp_path, epsilon_cap=2.0), SAMPLE.public_features,
                         SAMPLE.public_labels, hyper=HYPER, bounds=BOUNDS, epsilon=1.0,
                         delta=1e-5, iterations=15, **{**PLAN, "seed": 1})
    for spent in result.privacy.values():
        assert spent.job.epsilon <= 1.0
        assert spent.job.epsilon == pytest.approx(1.0, rel=2e-3)
        assert len(spent.mechanisms) == 15
    # Logistic loss: G = rY, B = log(1 + exp(Lambda r Y)).
    (w_block, _, _), (u_block,) = (result.noise_plan.mechanism.blocks,
                                   result.noise_plan.mechanism.local_blocks)
    # The w block declares what a site charges: 2G plus the rounding of its DIM
    # entries onto the coarsest grid a site accepts (2^-16).
    # plus the kernel's float error at up to 2^20 records (~1e-10 relative)
    assert w_block.sensitivity == pytest.approx(2 * 2.0 + math.sqrt(DIM) * 2**-16, rel=1e-9)
    assert u_block.sensitivity == pytest.approx(math.log1p(math.exp(10.0)))


def test_paper_step_one_over_beta_leaves_the_weights_nearly_frozen(tmp_path):
    # Documented finding: with one step 1/beta for w and u, u (scale n) barely moves.
    result = run(federation(tmp_path), iterations=50, step_sizes="paper", return_average=True)
    beta = smoothness_bound("logistic", HYPER, BOUNDS, M, N)
    assert result.step_sizes == StepSizes(1 / beta, 1 / beta, 1 / beta)
    np.testing.assert_allclose(result.public_weights, LOWER[:M], rtol=1e-3)
    assert np.linalg.norm(result.last_weights) > 0.1  # while w does move


def test_j_needs_a_finite_mu(tmp_path):
    model = PNCnvxAdap(alpha=0.5, mu=math.inf, epsilon=math.inf, delta=0.0, iterations=3,
                       feature_norm=BOUNDS.feature_norm, label_bound=BOUNDS.label_bound,
                       radius=BOUNDS.radius)
    with pytest.raises(ValueError, match="mu"):
        model.fit(federation(tmp_path), (SAMPLE.public_features, SAMPLE.public_labels))


def test_softmax_cross_entropy_enters_beta_through_its_own_g_b_and_r_squared_over_two():
    # Lemma 3's beta with the softmax constants in place of the logistic ones:
    # beta_w = r^2/2, G = sqrt(2) r, B = log(1 + (C-1) exp(sqrt(2) Lambda r)).
    classes = DataBounds(feature_norm=2.0, label_bound=1.0, radius=5.0, num_classes=4)
    softmax = smoothness_bound("softmax_cross_entropy", HYPER, classes, M, N)
    logistic = smoothness_bound("logistic", HYPER, classes, M, N)
    r, y, alpha = 2.0, 1.0, HYPER.alpha
    lowest = min(M / alpha, N / (1 - alpha))
    b_softmax = math.log(1 + 3 * math.exp(math.sqrt(2) * 5.0 * r))
    b_logistic = math.log1p(math.exp(5.0 * r * y))
    expected = (r * r / 2 - r * r * y * y / 4
                + (math.sqrt(2) * r - r * y) * (alpha**2 / M**1.5 + (1 - alpha) ** 2 / N**1.5)
                + 2 * (b_softmax - b_logistic) / lowest**3)
    assert softmax - logistic == pytest.approx(expected, rel=1e-9)
