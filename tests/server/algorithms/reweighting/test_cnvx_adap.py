"""PCnvxAdap / CnvxAdap (seed 000, Alg. 1) through the Federation protocol:
reaches the optimum of F, is exactly projected gradient descent on F whatever
the split over sites and however often rounds are retried, and every site's
ledger charges exactly the planned epsilon."""

import itertools
import math

import numpy as np
import pytest
from scipy import optimize

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.server.algorithms.reweighting.cnvx_adap import (
    cnvx_adap,
    paper_step_sizes,
    pcnvx_adap,
)
from privadapt.server.algorithms.reweighting.descent import (
    DataBounds,
    StepSizes,
    paper_noise_multiplier,
)
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap
from privadapt.server.algorithms.reweighting.objectives import (
    AdaptationSample,
    ReweightingHyperparameters,
    objective_and_gradient,
    reference_descent,
    weight_lower_bounds,
)

M, N, DIM = 40, 20, 3
BOUNDS = DataBounds(feature_norm=5.0, label_bound=5.0, radius=10.0)


def shifted_regression(seed=1):
    """Source and target with different covariates and regressors (covariate and
    concept shift), so some optimal weights leave their bounds."""
    rng = np.random.default_rng(seed)
    public = rng.normal(size=(M, DIM)) / 2
    private = rng.normal(size=(N, DIM)) / 2 + 0.3
    return AdaptationSample(
        public, public @ np.array([0.2, 0.5, 1.0]) + 0.1 * rng.normal(size=M),
        private, private @ np.array([1.0, -0.5, 0.3]) + 0.1 * rng.normal(size=N))


SAMPLE = shifted_regression()
LOWER = weight_lower_bounds(M, N, 0.5)
STEPS = StepSizes(1.0, LOWER[0] ** 3, LOWER[-1] ** 3)  # tuned for this instance
# The plan settings PCnvxAdap defaults, which the solver takes explicitly.
PLAN = {name: PCnvxAdap.parameter_defaults()[name] for name in
        ("step_scale", "step_distance", "calibration", "aggregate_noise_ratio", "chain")}


def federation(tmp_path, splits=(12,), epsilon_cap=math.inf, tag="f"):
    """Sites holding consecutive slices of the private sample, cut at ``splits``."""
    sites = []
    edges = [0, *splits, N]
    for k, (start, stop) in enumerate(itertools.pairwise(edges)):
        policy = SitePolicy(f"{tag}-{k}", epsilon_cap=epsilon_cap, delta_cap=1e-5,
                            allow_non_private=math.isinf(epsilon_cap))
        data = Dataset(SAMPLE.private_features[start:stop], SAMPLE.private_labels[start:stop],
                       tuple(f"x{i}" for i in range(DIM)))
        sites.append(Site(data, policy, PrivacyLedger(tmp_path / f"{tag}-{k}.db", policy,
                                                        create=True),
                          SeededRandomBits(k)))
    return LocalFederation(sites)


def run(fed, hyper, **options):
    options = {"step_sizes": STEPS, **PLAN, **options}
    return cnvx_adap(fed, SAMPLE.public_features, SAMPLE.public_labels, hyper=hyper,
                     bounds=BOUNDS, **options)


def scaled_objective(hyper):
    """F in (w, v = u / bounds), for scipy: v >= 1 are plain box constraints."""
    def fun(z):
        value, grad_w, grad_u = objective_and_gradient(z[:DIM], z[DIM:] * LOWER, SAMPLE, hyper)
        return value, np.concatenate([grad_w, grad_u * LOWER])
    return fun


def scipy_minimum(hyper, fixed_w=None):
    """min F (or min over u of F(fixed_w, u)) by L-BFGS-B (||w|| <= Lambda is inactive)."""
    fun = scaled_objective(hyper)
    if fixed_w is not None:
        def fun_u(v):
            value, gradient = fun(np.concatenate([fixed_w, v]))
            return value, gradient[DIM:]
        result = optimize.minimize(fun_u, np.ones(M + N), jac=True, method="L-BFGS-B",
                                   bounds=[(1, None)] * (M + N),
                                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
        return result.fun, None
    box = [(None, None)] * DIM + [(1, None)] * (M + N)
    result = optimize.minimize(fun, np.concatenate([np.zeros(DIM), np.ones(M + N)]), jac=True,
                               method="L-BFGS-B", bounds=box,
                               options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
    assert np.linalg.norm(result.x[:DIM]) < BOUNDS.radius
    return result.fun, result.x


@pytest.mark.slow
@pytest.mark.parametrize("hyper", [
    ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05, discrepancy=0.02),
    ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05, kinf=0.02, mu=200.0,
                               discrepancy=0.02),
], ids=["no-max-term", "softmax-max-term"])
def test_cnvx_adap_reaches_the_optimum_of_f(tmp_path, hyper):
    optimum, solution = scipy_minimum(hyper)
    assert np.sum(solution[DIM:] > 1 + 1e-3) > 5  # the weights matter at the optimum
    result = run(federation(tmp_path), hyper, iterations=1200)
    # F at the returned w with u re-optimised (the private u's stay at the sites).
    last, _ = scipy_minimum(hyper, fixed_w=result.last_weights)
    average, _ = scipy_minimum(hyper, fixed_w=result.weights)
    assert last == pytest.approx(optimum, rel=1e-4)
    np.testing.assert_allclose(result.last_weights, solution[:DIM], atol=3e-3)
    # The paper's output, the average iterate, converges as O(1/T): looser.
    assert average == pytest.approx(optimum, rel=3e-3)


def test_cnvx_adap_is_projected_gradient_descent_on_f_iterate_by_iterate(tmp_path):
    hyper = ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05, kinf=0.02, mu=200.0,
                                       discrepancy=0.02)
    result = run(federation(tmp_path), hyper, iterations=40, step_sizes=STEPS)
    iterates = reference_descent(SAMPLE, hyper, objective="convex", loss="squared",
                                 radius=BOUNDS.radius, iterations=40,
                                 step_sizes=(STEPS.weights, STEPS.public_weights,
                                             STEPS.private_weights))
    np.testing.assert_allclose(result.last_weights, iterates[-1][0], rtol=1e-7)
    np.testing.assert_allclose(result.weights, np.mean([w for w, _ in iterates], axis=0),
                               rtol=1e-7)
    np.testing.assert_allclose(result.public_weights,
                               np.mean([u[:M] for _, u in iterates], axis=0), rtol=1e-9)


def test_result_does_not_depend_on_how_records_are_split_over_sites(tmp_path):
    hyper = ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05, kinf=0.02, mu=200.0)
    one = run(federation(tmp_path, splits=(), tag="one"), hyper, iterations=30)
    three = run(federation(tmp_path, splits=(5, 9), tag="three"), hyper, iterations=30)
    np.testing.assert_allclose(one.weights, three.weights, rtol=1e-8)


class RetryingFederation:
    """Every round is asked twice, under two query ids, as the networked
    federation does after a dropout; only the second answer is used."""

    def __init__(self, inner: LocalFederation) -> None:
        self.inner = inner
        self.job_id, self.num_sites = inner.job_id, inner.num_sites

    @property
    def site_sizes(self):
        return self.inner.site_sizes

    def query(self, kernel, params, mechanism):
        self.inner.query(kernel, params, mechanism)
        return self.inner.query(kernel, params, mechanism)

    def privacy_spent(self, delta=None):
        return self.inner.privacy_spent(delta)


def test_retried_rounds_apply_each_weight_update_once(tmp_path):
    hyper = ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05)
    plain = run(federation(tmp_path, tag="plain"), hyper, iterations=25)
    retried_federation = RetryingFederation(federation(tmp_path, tag="retried"))
    retried = run(retried_federation, hyper, iterations=25)
    np.testing.assert_array_equal(retried.weights, plain.weights)
    assert len(retried.privacy["retried-0"].mechanisms) == 50  # every attempt was charged


def test_private_run_charges_the_planned_epsilon_at_every_site(tmp_path):
    hyper = ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05, kinf=0.02, mu=200.0)
    result = pcnvx_adap(federation(tmp_path, splits=(7, 14), epsilon_cap=3.0),
                        SAMPLE.public_features, SAMPLE.public_labels, hyper=hyper,
                        bounds=DataBounds(2.0, 2.0, 2.0), epsilon=2.0, delta=1e-5,
                        iterations=20, **PLAN)
    assert len(result.privacy) == 3
    for spent in result.privacy.values():
        assert spent.job.epsilon <= 2.0
        assert spent.job.epsilon == pytest.approx(2.0, rel=2e-3)
        assert len(spent.mechanisms) == 20
        # Three released blocks and the local u-gradient, as explicit groups.
        assert all((len(m.blocks), len(m.local_blocks)) == (3, 1) for m in spent.mechanisms)
    assert np.all(np.isfinite(result.weights))
    assert np.linalg.norm(result.weights) <= 2.0 + 1e-12


def test_paper_calibration_uses_the_sigmas_of_lines_2_and_3(tmp_path):
    bounds = DataBounds(1.0, 1.0, 1.0)
    result = pcnvx_adap(federation(tmp_path, epsilon_cap=20.0), SAMPLE.public_features,
                        SAMPLE.public_labels, hyper=ReweightingHyperparameters(alpha=0.5),
                        bounds=bounds, epsilon=1.0, delta=1e-3, iterations=5,
                        **{**PLAN, "calibration": "paper"})
    z = 2 * math.sqrt(5 * math.log(2 / 1e-3)) / 1.0
    assert result.noise_plan.noise_multiplier == pytest.approx(z)
    (w_block, _, _), (u_block,) = (result.noise_plan.mechanism.blocks,
                                   result.noise_plan.mechanism.local_blocks)
    gradient_bound, loss_bound = 2 * 1 * (1 + 1), (1 + 1) ** 2  # G = 2r(Lr+Y), B = (Lr+Y)^2
    # The w block's noise also covers the rounding of its DIM entries onto the
    # coarsest grid a site accepts (2^-16), and the kernel's float error at a
    # site of up to 2^20 records (a few 1e-10 relative); the local u block is
    # never rounded.
    assert w_block.sigma == pytest.approx(z * (2 * gradient_bound + math.sqrt(DIM) * 2**-16),
                                          rel=1e-9)
    assert u_block.sigma == pytest.approx(z * loss_bound, rel=1e-12)
    assert paper_noise_multiplier(1.0, 1e-3, 5) == pytest.approx(z)


def test_paper_step_sizes_follow_line_4_without_noise():
    hyper = ReweightingHyperparameters(alpha=0.5, k1=0.1, k2=0.2, kinf=0.3, mu=10.0)
    steps = paper_step_sizes(hyper, DataBounds(1.0, 1.0, 2.0), M, N, DIM, 100, math.inf)
    loss_bound, gradient_bound = (2 + 1) ** 2, 2 * (2 + 1)
    bound_sum = loss_bound + 0.6
    assert steps.weights == pytest.approx(2.0 / (10 * gradient_bound))
    assert steps.public_weights == pytest.approx(M**1.5 / (10 * 0.25 * (loss_bound + bound_sum)))
    assert steps.private_weights == pytest.approx(N**1.5 / (10 * 0.25 * bound_sum))


@pytest.mark.parametrize(("options", "message"), [
    ({"step_sizes": "fast"}, "step_sizes"),
    ({"hyper": ReweightingHyperparameters(alpha=0.5, kinf=0.1)}, "mu"),
])
def test_bad_arguments_are_refused_before_any_query(tmp_path, options, message):
    arguments = {"hyper": ReweightingHyperparameters(alpha=0.5), "iterations": 5, **PLAN,
                 **options}
    fed = federation(tmp_path)
    with pytest.raises(ValueError, match=message):
        cnvx_adap(fed, SAMPLE.public_features, SAMPLE.public_labels, bounds=BOUNDS, **arguments)
    assert all(not p.mechanisms for p in fed.privacy_spent().values())


def test_zero_iterations_are_refused_before_any_query(tmp_path):
    fed = federation(tmp_path)
    model = PCnvxAdap(alpha=0.5, epsilon=math.inf, delta=0.0, iterations=0,
                      feature_norm=BOUNDS.feature_norm, label_bound=BOUNDS.label_bound,
                      radius=BOUNDS.radius)
    with pytest.raises(ValueError, match="iterations"):
        model.fit(fed, (SAMPLE.public_features, SAMPLE.public_labels))
    assert all(not p.mechanisms for p in fed.privacy_spent().values())


def test_without_weight_noise_the_release_has_three_blocks_and_meets_epsilon(tmp_path):
    hyper = ReweightingHyperparameters(alpha=0.5, k1=0.02, k2=0.05)
    result = pcnvx_adap(federation(tmp_path, epsilon_cap=3.0), SAMPLE.public_features,
                        SAMPLE.public_labels, hyper=hyper, bounds=DataBounds(2.0, 2.0, 2.0),
                        epsilon=2.0, delta=1e-5, iterations=10, weight_noise=False, **PLAN)
    for spent in result.privacy.values():
        assert spent.job.epsilon == pytest.approx(2.0, rel=2e-3) and spent.job.epsilon <= 2.0
        assert all((len(m.blocks), len(m.local_blocks)) == (3, 0) for m in spent.mechanisms)
    # Noise off, with or without the (absent) weight noise: the same iterates.
    quiet = run(federation(tmp_path, tag="quiet"), hyper, iterations=20, weight_noise=False)
    loud = run(federation(tmp_path, tag="loud"), hyper, iterations=20)
    np.testing.assert_array_equal(quiet.weights, loud.weights)
