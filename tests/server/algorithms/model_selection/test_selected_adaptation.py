"""SelectedAdaptation: the job's ledger total is the plan's and at most
epsilon, the free source-only model is kept where nothing can beat it, a
private candidate is taken where target-only learning clearly wins, unknown
or conflicting candidate names are refused, and the estimator clones."""

import math
from contextlib import contextmanager

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.kernels.reweighted_chains import chain_names
from privadapt.server.algorithms.base import InvalidParameterError, clone
from privadapt.server.algorithms.model_selection.candidates import (
    CANDIDATE_IDS,
    SOURCE_ONLY,
    candidate_names,
)
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation

DIM = 5
TARGET = np.array([1.0, -2.0, 0.5, 1.5, 1.0])
SOURCE = np.array([-1.0, 2.0, 0.5, 1.5, 1.0])  # the shift: two signs flipped
DELTA = 1e-5


def logistic(n, weights, seed):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ weights + 0.1 * rng.normal(size=n) >= 0, 1.0, -1.0)
    return features, labels


def sites(n, seed, num_sites=3):
    features, labels = logistic(n, TARGET, seed)
    names = tuple(f"x{i}" for i in range(DIM))
    return [Dataset(features[rows], labels[rows], names)
            for rows in np.array_split(np.arange(n), num_sites)]


@contextmanager
def parts(n, seed, num_sites=3):
    """(train, validation) record-part views of one job over the sites: each
    site splits its own records by content hash (common/data/record_parts.py)."""
    with LocalFederation.from_datasets(sites(n, seed, num_sites), noise_seed=seed,
                                       epsilon_cap=20.0, delta_cap=1e-3) as federation:
        salt = federation.job_id
        yield (federation.restricted_to(RecordPart("train", 0.25, salt)),
               federation.restricted_to(RecordPart("validation", 0.25, salt)))


def selector(**params):
    settings = {"loss": "logistic", "radius": 10.0, "epsilon": 1.0, "delta": DELTA,
                "loss_bound": 2.0, "learning_rate": 4.0, "iterations": 20,
                "candidates": "noisy_gd"}
    return SelectedAdaptation(**{**settings, **params})


PUBLIC = logistic(2000, SOURCE, seed=99)


def test_basic_composition_costs_the_basic_plan_and_at_most_epsilon():
    model = selector(epsilon=2.0, candidates="noisy_gd,pncnvx_adap_smooth",
                     adapter_iterations=10, selection_share=0.3, composition="basic")
    plan = model.budget_plan()
    assert sum(e for e, _ in plan.values()) == pytest.approx(2.0)
    assert sum(d for _, d in plan.values()) == pytest.approx(DELTA)
    assert plan["selection"] == pytest.approx((0.6, 0.3 * DELTA))
    with parts(1200, seed=0) as (train, validation):
        model.fit(train, validation, PUBLIC)
    assert model.budget_plan_ == plan
    assert model.budget_scale_ == 1.0 and model.joint_calibration_ is None
    for step, (epsilon, _) in plan.items():  # each step's own releases, at its own delta
        for spent in model.candidate_privacy_[step].values():
            assert spent <= epsilon
            assert spent == pytest.approx(epsilon, rel=2e-3)
    for spent in model.privacy_.values():  # one ledger per site, the whole job at delta
        assert spent.job.epsilon <= 2.0
    assert model.privacy_.keys() == model.train_privacy_.keys()


def test_basic_composition_keeps_the_previous_ledger_total():
    """composition="basic" is the plan before joint calibration: the ledger
    total the previous code left (0.57 epsilon at epsilon 1, two candidates)."""
    with LocalFederation.from_datasets(sites(1200, 1), noise_seed=1, epsilon_cap=20.0,
                                       delta_cap=1e-3, job_id="job-basic") as federation:
        # The pinned total is the loss score's (the default for a logistic
        # job is now the error score, L = 1).
        model = selector(candidates="noisy_gd,pncnvx_adap_smooth", adapter_iterations=10,
                         composition="basic", selection_score="loss").fit(federation, None,
                                                                          PUBLIC)
    for spent in model.privacy_.values():
        assert spent.job.epsilon == pytest.approx(0.5688757335719412, rel=1e-9)


@pytest.mark.parametrize("score", ["paired", "loss"])
def test_tiny_n_keeps_the_free_source_only_model(score):
    # The paired score releases nothing there (test_selected_adaptation_paired.py).
    chosen = []
    for seed in range(8):
        with parts(60, seed=seed) as (train, validation):
            chosen.append(selector(epsilon=3.0, selection_score=score).fit(
                train, validation, PUBLIC).chosen_)
    assert chosen.count(SOURCE_ONLY) >= 7


def test_a_private_candidate_is_chosen_where_target_only_clearly_wins():
    test = logistic(2000, TARGET, seed=12345)
    for seed in range(3):
        with parts(3000, seed=seed) as (train, validation):
            model = selector(epsilon=10.0).fit(train, validation, PUBLIC)
        assert model.chosen_ == "noisy_gd"
        assert model.best_index_ == 1
        np.testing.assert_array_equal(model.coef_, model.learners_["noisy_gd"].coef_)
        assert model.score(*test) > 0.9 > float(np.mean(np.sign(test[0] @ model.candidates_[0])
                                                        == test[1]))


def test_model_arrays_carry_the_choice_as_numbers():
    # Epsilon 10: at 1 the paired release could not certify anything on 75
    # validation records and nothing would be trained (the next test).
    with parts(300, seed=1) as (train, validation):
        model = selector(epsilon=10.0).fit(train, validation, PUBLIC)
    arrays = model.model_arrays()
    assert all(value.dtype.kind in "fi" for value in arrays.values())
    assert candidate_names(arrays["candidate_ids"]) == model.candidate_names_ \
        == [SOURCE_ONLY, "noisy_gd"]
    assert CANDIDATE_IDS[int(arrays["chosen_id"])] == model.chosen_
    np.testing.assert_array_equal(arrays["weights"],
                                  arrays["candidates"][int(arrays["best_index"])])


@pytest.mark.parametrize("candidates, message", [
    ("noisy_gd,pncnvx_adpa", "did you mean 'pncnvx_adap'"),
    ("noisy_gd,,pncnvx_adap", "comma-separated"),
    ("noisy_gd,noisy_gd", "twice"),
    ("source_only,noisy_gd", "always candidate 0"),
    ("pcnvx_adap", "needs loss 'squared'"),
])
def test_bad_candidate_lists_are_refused_before_any_query(candidates, message):
    model = selector(candidates=candidates)
    with parts(60, seed=0) as (train, validation):
        with pytest.raises(InvalidParameterError, match=message):
            model.fit(train, validation, PUBLIC)
        assert not train.privacy_spent()["site-1"].mechanisms


def test_a_validation_federation_or_record_parts_are_required():
    class NoParts:  # a federation whose sites cannot split their records
        job_id = "job"

    with pytest.raises(InvalidParameterError, match="S2"):
        selector().fit(NoParts(), None, PUBLIC)


def test_one_federation_is_split_into_its_sites_record_parts_under_the_job_id():
    """fit(federation) (a networked job) is fit(train part, validation part)
    of that federation, salted with its job id: same queries, same answers."""
    models = []
    for explicit in (False, True):
        with LocalFederation.from_datasets(sites(300, 2), noise_seed=2, epsilon_cap=20.0,
                                           delta_cap=1e-3, job_id="job-parts") as federation:
            given = ((federation.restricted_to(RecordPart("train", 0.25, "job-parts")),
                      federation.restricted_to(RecordPart("validation", 0.25, "job-parts")))
                     if explicit else (federation, None))
            # Epsilon 10: enough for the paired release to run on 75 records.
            models.append(selector(validation_fraction=0.25, epsilon=10.0).fit(*given, PUBLIC))
    assert models[0].noisy_losses_ is not None
    np.testing.assert_array_equal(models[0].coef_, models[1].coef_)
    np.testing.assert_array_equal(models[0].noisy_losses_, models[1].noisy_losses_)


def test_get_params_set_params_and_clone():
    model = selector(candidates="noisy_gd,pncnvx_adap", selection_share=0.4)
    copy = clone(model)
    assert copy is not model and copy.get_params() == model.get_params()
    copy.set_params(candidates="noisy_gd", baseline_confidence=None)
    assert model.candidates == "noisy_gd,pncnvx_adap"
    assert copy.get_params()["baseline_confidence"] is None
    with pytest.raises(InvalidParameterError, match="no parameter"):
        copy.set_params(candidate="noisy_gd")
    assert "selection_share=0.4" in repr(model)


def test_the_noise_free_oracle_plans_no_budget():
    plan = selector(epsilon=math.inf, delta=0.0, candidates="noisy_gd,pncnvx_adap").budget_plan()
    assert plan == {"noisy_gd": (math.inf, 0.0), "pncnvx_adap": (math.inf, 0.0),
                    "selection": (math.inf, 0.0)}


def test_every_hyperparameter_is_a_scalar_a_job_can_carry():
    from privadapt.server.jobs.catalog import job_schema
    schema = job_schema(SelectedAdaptation)
    assert schema.optional["candidates"] == (str,)
    assert set(schema.required) == {"loss", "radius"}
    assert schema.optional["loss_bound"] == (int, float, str)
    assert SelectedAdaptation.requires_public_source


def test_the_automatic_clip_is_a_quantile_of_the_free_models_public_losses():
    with parts(300, seed=2) as (train, validation):
        # The automatic clip applies to the loss score (the error score's L is 1).
        model = selector(loss_bound="auto", selection_score="loss").fit(train, validation,
                                                                       PUBLIC)
    margins = PUBLIC[0] @ model.candidates_[0]
    losses = np.logaddexp(0.0, -PUBLIC[1] * margins)
    assert model.loss_bound_ == pytest.approx(np.quantile(losses, 0.95))


def test_two_reweighting_adapters_share_a_job_each_on_its_own_chain():
    """Each adapter candidate keeps its site weights on the chain named after
    it (common/kernels/reweighted_chains.py): both descend in one job, every
    site holds both chains, and the job costs at most its epsilon."""
    model = selector(loss="squared", candidates="pcnvx_adap,pncnvx_adap_smooth",
                     adapter_iterations=5, loss_bound="auto", selection_score="loss")
    with LocalFederation.from_datasets(sites(900, 2), noise_seed=2, epsilon_cap=20.0,
                                       delta_cap=1e-3) as federation:
        model.fit(federation, None, PUBLIC)
        for site in federation.sites:
            assert chain_names(site._job_states[federation.job_id]) == [
                "pcnvx_adap", "pncnvx_adap_smooth"]
    assert model.candidate_names_ == [SOURCE_ONLY, "pcnvx_adap", "pncnvx_adap_smooth"]
    for name in ("pcnvx_adap", "pncnvx_adap_smooth"):
        assert model.learners_[name].chain == name
    for spent in model.privacy_.values():
        assert spent.job.epsilon <= 1.0
