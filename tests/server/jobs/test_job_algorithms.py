"""The job table: schemas derived from the estimators, launch-time checks, and
jobs run through the table in-process (LocalFederation stands in for the
NetworkFederation, which the networked tests exercise)."""

import inspect
import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import DiscreteLaplaceMechanism, LaplaceMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.discrepancy_minimization.estimators import (
    PrivateDiscrepancyMinimization,
)
from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfeTransfer
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.model_selection.confidence_boosting import ConfidenceBoosting
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation
from privadapt.server.algorithms.output_perturbation.estimators import OutputPerturbation
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap
from privadapt.server.algorithms.source_target_clustering.estimators import (
    NeighborNoisyAverages,
    NoisyAverageSet,
)
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_mixture_sampler import (
    PrivateGaussianMixtureSampler,
)
from privadapt.server.jobs.catalog import (
    ALGORITHMS,
    JobContext,
    job_schema,
    run_job,
    validate_hyperparameters,
)
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.privacy_plan import charged_at_site
from tests.synthetic_data import synthetic_dataset

DIM = 3
DATASETS = [synthetic_dataset(50 + 10 * k, DIM, seed=k) for k in range(2)]
PUBLIC = synthetic_dataset(70, DIM, seed=21)
NUMBER = (int, float)
GD_HYPER = {"loss": "logistic", "iterations": 6, "learning_rate": 2.0, "radius": 5.0,
            "clip_norm": 1.0}
ADAPT_HYPER = {"alpha": 0.5, "iterations": 5, "feature_norm": 1.0, "label_bound": 1.0,
               "radius": 5.0, "l1": 0.01, "mu": 100.0, "step_scale": 10}


def test_the_table_holds_estimator_classes():
    assert {"noisy_gd": NoisyGD, "pcnvx_adap": PCnvxAdap,
                          "pncnvx_adap": PNCnvxAdap,
            "discrepancy_minimization": PrivateDiscrepancyMinimization,
            "nna": NeighborNoisyAverages, "nas": NoisyAverageSet,
            "dp_frank_wolfe_transfer": DPFrankWolfeTransfer,
            "selected_adaptation": SelectedAdaptation,
            "dp_lloyd_kmeans": PrivateLloydKMeans,
            "dp_mixture": PrivateGaussianMixtureSampler,
            "confidence_boosting": ConfidenceBoosting,
            "output_perturbation": OutputPerturbation} == ALGORITHMS


def test_noisy_gd_schema_is_the_signature_minus_what_the_spec_sets():
    schema = job_schema(NoisyGD)
    assert schema.required == {"loss": (str,), "iterations": (int,), "learning_rate": NUMBER,
                               "radius": (*NUMBER, str), "clip_norm": NUMBER}  # str: "auto"
    # calibration comes from the spec; num_guesses to validation_fraction serve
    # radius="auto"; a center array cannot cross the wire, its names can
    assert schema.optional == {"checkpoint_every": (int,), "num_guesses": (int,),
                               "feature_bound": NUMBER, "label_bound": NUMBER,
                               "validation_fraction": NUMBER, "center": (str,),
                               "source_radius": NUMBER, "average": (str,)}
    assert schema.defaults == {"checkpoint_every": 10, "num_guesses": 5, "feature_bound": None,
                               "label_bound": None, "validation_fraction": 0.25,
                               "center": "zero", "source_radius": None, "average": "none"}


@pytest.mark.parametrize("estimator", [PCnvxAdap, PNCnvxAdap])
def test_adaptation_schemas_follow_the_signature_and_its_defaults(estimator):
    schema = job_schema(estimator)
    signature = inspect.signature(estimator.__init__).parameters
    from_spec = {"epsilon", "delta", "calibration", "seed"}
    wire = {name for name in signature if name != "self"} - from_spec
    assert set(schema.required) == {"alpha", "feature_norm", "label_bound", "radius"}
    assert set(schema.required) | set(schema.optional) == wire
    for name in schema.optional:
        assert schema.defaults[name] == signature[name].default
    assert schema.optional["weight_noise"] == (bool,)
    assert schema.optional["step_sizes"] == (str,)  # StepSizes objects cannot cross the wire
    assert schema.optional["iterations"] == (int, str)  # a count or "auto"
    assert schema.defaults["iterations"] == "auto" and schema.defaults["clip_radius"] == "auto"
    assert "checkpoint_every" not in schema.optional  # their fit takes no checkpoint
    assert schema.defaults["mu"] == (math.inf if estimator is PCnvxAdap else 100.0)


@pytest.mark.parametrize(
    ("algorithm", "values", "message"),
    [
        ("no-such", {}, "unknown algorithm 'no-such'"),
        ("noisy_gd", {k: v for k, v in GD_HYPER.items() if k != "radius"},
         "algorithm 'noisy_gd' needs hyperparameter 'radius'"),
        ("noisy_gd", {**GD_HYPER, "epsilon": 1.0}, "has no hyperparameter 'epsilon'"),
        ("noisy_gd", {**GD_HYPER, "iterations": 6.0}, "'iterations' has the wrong type"),
        ("noisy_gd", {**GD_HYPER, "radius": True}, "'radius' has the wrong type"),
        ("noisy_gd", {**GD_HYPER, "radius": math.inf}, "'radius' must be finite"),
        ("noisy_gd", {**GD_HYPER, "loss": "hinge"}, "'loss' must be one of 'logistic'"),
        ("noisy_gd", {**GD_HYPER, "checkpoint_every": 0}, "'checkpoint_every' must be >= 1"),
        ("pncnvx_adap", {**ADAPT_HYPER, "alpha": 1.5}, r"'alpha' must be a number in \(0, 1\)"),
        ("pncnvx_adap", {**ADAPT_HYPER, "seed": 3}, "has no hyperparameter 'seed'"),
        ("pcnvx_adap", {**ADAPT_HYPER}, "has no hyperparameter 'l1'"),
    ],
)
def test_bad_hyperparameters_are_refused_at_launch(algorithm, values, message):
    with pytest.raises(ConfigError, match=message):
        validate_hyperparameters(algorithm, values)


def test_every_problem_is_listed_at_once_with_the_closest_known_name():
    values = {"loss": "logistic", "iteratons": 5, "learning_rate": "fast", "clip_norm": 1.0,
              "epsilon": 1.0, "zzz": 1}
    with pytest.raises(ConfigError) as refused:
        validate_hyperparameters("noisy_gd", values)
    message = str(refused.value)
    assert message.startswith("algorithm 'noisy_gd' needs hyperparameters 'iterations', "
                              "'radius'; ")
    assert "has no hyperparameter 'iteratons' (did you mean 'iterations'?)" in message
    assert "has no hyperparameter 'epsilon' (it is a [job] key, not a hyperparameter)" in message
    assert "has no hyperparameter 'zzz'; " in message  # nothing close: no guess
    assert "hyperparameter 'learning_rate' has the wrong type: 'fast' (expected" in message
    assert message.endswith("known: ['average', 'center', 'checkpoint_every', 'clip_norm', "
                            "'feature_bound', 'iterations', 'label_bound', 'learning_rate', "
                            "'loss', 'num_guesses', 'radius', 'source_radius', "
                            "'validation_fraction']")
    with pytest.raises(ConfigError, match=r"unknown algorithm 'noisy-gd' \(did you mean "
                                          r"'noisy_gd'\?\)"):
        validate_hyperparameters("noisy-gd", {})


def test_good_hyperparameters_pass():
    validate_hyperparameters("noisy_gd", {**GD_HYPER, "checkpoint_every": 2})
    validate_hyperparameters("pncnvx_adap", {**ADAPT_HYPER, "weight_noise": False})


def _federation(tmp_path, name):
    return LocalFederation.from_datasets(DATASETS, epsilon_cap=10.0, delta_cap=1e-5,
                                         ledger_dir=tmp_path / name, noise_seed=4)


def test_a_noisy_gd_job_runs_through_the_table_as_the_estimator_fits(tmp_path):
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=1e-6)  # calibration unset
    checkpoints = []
    context = JobContext(_federation(tmp_path, "job"), spec,
                         {**GD_HYPER, "checkpoint_every": 2}, seed=0,
                         checkpoint=lambda step, model: checkpoints.append((step, set(model))),
                         public_source=PUBLIC)
    model = run_job(context)
    expected = NoisyGD(epsilon=1.0, delta=1e-6, **GD_HYPER).fit(_federation(tmp_path, "fit"))
    assert set(model) == {"weights", "average_weights", "noise_multiplier"}
    np.testing.assert_array_equal(model["weights"], expected.coef_)
    np.testing.assert_array_equal(model["average_weights"], expected.average_coef_)
    assert float(model["noise_multiplier"]) == expected.noise_multiplier_
    assert checkpoints == [(2, {"weights"}), (4, {"weights"}), (6, {"weights"})]


def test_a_noisy_gd_job_centred_at_source_only_is_fitted_on_the_coordinators_sample(tmp_path):
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=1e-6)
    hyper = {**GD_HYPER, "center": "source_only", "average": "tail", "radius": 0.5,
             "source_radius": 5.0}
    model = run_job(JobContext(_federation(tmp_path, "job"), spec, hyper, seed=0,
                               checkpoint=lambda step, model: None, public_source=PUBLIC))
    expected = NoisyGD(epsilon=1.0, delta=1e-6, **hyper).fit(_federation(tmp_path, "fit"),
                                                            PUBLIC)
    np.testing.assert_array_equal(model["weights"], expected.coef_)
    np.testing.assert_array_equal(model["center"], expected.center_)
    with pytest.raises(ConfigError, match="noisy_gd needs the public source sample"):
        run_job(JobContext(_federation(tmp_path, "none"), spec, hyper, seed=0,
                           checkpoint=lambda step, model: None))


def test_a_pncnvx_adap_job_takes_epsilon_delta_calibration_and_seed_from_the_spec(tmp_path):
    spec = pb.JobSpec(algorithm="pncnvx_adap", epsilon=2.0, delta=1e-6, calibration="paper")
    context = JobContext(_federation(tmp_path, "job"), spec, ADAPT_HYPER, seed=11,
                         checkpoint=lambda step, model: None, public_source=PUBLIC)
    model = run_job(context)
    expected = PNCnvxAdap(epsilon=2.0, delta=1e-6, calibration="paper", seed=11,
                          **{**ADAPT_HYPER, "step_scale": 10.0})
    expected.fit(_federation(tmp_path, "fit"), PUBLIC)
    assert set(model) == {"weights", "public_weights", "average_weights", "last_weights"}
    np.testing.assert_array_equal(model["weights"], expected.coef_)
    np.testing.assert_array_equal(model["public_weights"], expected.public_weights_)


def test_an_adaptation_job_without_a_public_source_fails_naming_the_setting(tmp_path):
    spec = pb.JobSpec(algorithm="pcnvx_adap", epsilon=1.0, delta=1e-6)
    hyper = {k: v for k, v in ADAPT_HYPER.items() if k != "l1"}
    context = JobContext(_federation(tmp_path, "job"), spec, hyper, seed=0,
                         checkpoint=lambda step, model: None)
    with pytest.raises(ConfigError, match=r"\[coordinator\] public_source"):
        run_job(context)


def _stc_federation(tmp_path, name: str) -> LocalFederation:
    return LocalFederation.from_datasets(DATASETS, epsilon_cap=50.0, delta_cap=1e-5,
                                         ledger_dir=tmp_path / name, noise_seed=3,
                                         adjacency="add_remove_one")


@pytest.mark.parametrize("algorithm, hyper", [
    ("nna", {"k": 4}),
    ("nna", {"k": 4, "noise": "gaussian", "coreset": False}),
    ("nas", {"k": 3, "t": 10, "variant": "gaussian", "rho": 1.0}),
])
def test_source_target_clustering_jobs_choose_k_rows_of_the_public_target(
        tmp_path, algorithm, hyper):
    validate_hyperparameters(algorithm, hyper)
    spec = pb.JobSpec(algorithm=algorithm, epsilon=3.0, delta=1e-6)
    context = JobContext(_stc_federation(tmp_path, "job"), spec, hyper, seed=4,
                         checkpoint=lambda step, model: None, public_source=PUBLIC)
    model = run_job(context)
    expected = ALGORITHMS[algorithm](epsilon=3.0, delta=1e-6, seed=4, **hyper)
    expected.fit(_stc_federation(tmp_path, "fit"), public_source=PUBLIC)
    assert set(model) == {"indices", "sanitized_source", "epsilon", "delta",
                          "planned_epsilon", "planned_rho"}
    if hyper.get("noise", hyper.get("variant")) == "gaussian":  # zCDP stated at delta
        rho = float(model["planned_rho"])
        assert float(model["delta"]) == 1e-6
        assert float(model["epsilon"]) == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e6)))
    else:
        assert float(model["delta"]) == 0.0 and float(model["epsilon"]) == pytest.approx(3.0)
    np.testing.assert_array_equal(model["indices"], expected.indices_)
    assert len(set(model["indices"].tolist())) == hyper["k"]
    assert model["indices"].max() < len(PUBLIC.features)


BASELINE_JOBS = [
    ("dp_lloyd_kmeans", {"n_clusters": 5, "iterations": 3}, "centres"),
    ("dp_lloyd_kmeans", {"n_clusters": 5, "iterations": 2, "noise": "discrete"}, "centres"),
    ("dp_mixture", {"n_components": 4, "iterations": 3, "n_samples": 20}, "samples"),
]


@pytest.mark.parametrize("algorithm, hyper, output", BASELINE_JOBS)
def test_seed_001_baseline_jobs_spend_the_jobs_epsilon_as_pure_dp(
        tmp_path, algorithm, hyper, output):
    validate_hyperparameters(algorithm, hyper)
    spec = pb.JobSpec(algorithm=algorithm, epsilon=2.0, delta=1e-6)
    federation = _stc_federation(tmp_path, "job")
    context = JobContext(federation, spec, hyper, seed=4, checkpoint=lambda step, model: None)
    model = run_job(context)
    expected = ALGORITHMS[algorithm](epsilon=2.0, seed=4, **hyper)
    expected.fit(_stc_federation(tmp_path, "fit"))
    np.testing.assert_array_equal(model[output], getattr(expected, f"{output}_"))
    for spent in federation.privacy_spent(0.0).values():  # pure: epsilon at delta 0
        assert 2.0 * (1 - 1e-2) <= spent.job.epsilon <= 2.0
    plan = plan_releases(spec, hyper, {"a": None, "b": None}, DIM, None)
    assert len(plan) == hyper["iterations"]
    assert {r.kernel for r in plan} == {"nearest_target_sums"}
    # noise="discrete": the planner has the job's fixed-point grid, so it is planned too.
    kind = DiscreteLaplaceMechanism if hyper.get("noise") == "discrete" else LaplaceMechanism
    assert all(type(r.mechanism) is kind for r in plan)
    assert [m.noise_scales for m in expected.mechanisms_] == [r.mechanism.noise_scales
                                                               for r in plan]
    # The plan, as each site charges it, is what each site's ledger charged.
    for site in federation.sites:
        charged = [c.mechanism for c in site.ledger.charges(federation.job_id)]
        bound = site.policy.range_records(site.num_records)
        assert charged == [charged_at_site(r, site.policy.adjacency, DIM, bound) for r in plan]


@pytest.mark.parametrize("algorithm", ["dp_lloyd_kmeans", "dp_mixture"])
def test_a_baseline_job_with_a_zcdp_budget_too_is_refused_naming_it(tmp_path, algorithm):
    spec = pb.JobSpec(algorithm=algorithm, epsilon=2.0, delta=1e-6)
    context = JobContext(_stc_federation(tmp_path, "job"), spec, {"rho": 1.0}, seed=4,
                         checkpoint=lambda step, model: None)
    with pytest.raises(ValueError, match="leave 'rho' out"):
        run_job(context)
