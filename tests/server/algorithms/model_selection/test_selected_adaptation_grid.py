"""SelectedAdaptation's free public-constant candidate and its per-candidate
settings: the constant reads only the public source and
predicts its majority label (mean label) everywhere; a grid of settings is
one candidate per variant, each adapter on its own chain, the ledgers hold
the calibrated plan, the chosen index maps back to its settings, and a bad
grid is refused at launch, at dry run and at fit before any query."""

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.data.record_parts import RecordPart, RecordSplitter
from privadapt.common.errors import ConfigError
from privadapt.common.kernels.reweighted_chains import chain_names
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.model_selection.candidates import (
    MAX_PRIVATE_CANDIDATES,
    PUBLIC_CONSTANT,
    SOURCE_ONLY,
    candidate_names,
    intercept_column,
    parse_candidates,
    public_constant_model,
)
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation
from privadapt.server.jobs.launch_checks import check_estimator
from privadapt.server.jobs.spec import hyperparameters
from tests.server.algorithms.model_selection.test_selected_adaptation import (
    PUBLIC,
    parts,
    selector,
    sites,
)
from tests.server.algorithms.model_selection.test_selected_adaptation_pld import (
    assert_ledgers_hold_the_plan,
)

DIM = 5
NAMES = (*(f"x{i}" for i in range(DIM - 1)), "intercept")


def with_intercept(features, labels, value=0.5):
    """The last feature replaced by a constant intercept column, named so."""
    features = np.array(features, dtype=float)
    features[:, -1] = value
    return Dataset(features, np.asarray(labels, float), NAMES)


def test_the_public_constant_predicts_the_public_majority_label_everywhere():
    labels = np.where(np.arange(400) % 10 < 3, 1.0, -1.0)  # 30% positive
    public = with_intercept(np.random.default_rng(0).normal(size=(400, DIM)), labels)
    weights = public_constant_model(public.features, public.labels, "logistic", 10.0,
                                    public.feature_names)
    assert np.count_nonzero(weights) == 1 and weights[-1] < 0  # intercept only, majority -1
    # the log-odds of the public label rate, through the intercept column's value 0.5
    assert 0.5 * weights[-1] == pytest.approx(np.log(0.3 / 0.7), abs=1e-3)
    squared = public_constant_model(public.features, 3 * labels, "squared", 10.0,
                                    public.feature_names)
    assert 0.5 * squared[-1] == pytest.approx(np.mean(3 * labels), abs=1e-4)


def test_the_intercept_is_found_by_name_else_only_when_unambiguous():
    features = np.ones((5, 3))
    features[:, 0] = np.arange(5)
    assert intercept_column(features, ("a", "intercept", "b")) == 1
    assert intercept_column(features, None) is None  # two constant columns: ambiguous
    features[:, 1] = [0, 1, 0, 1, 0]
    assert intercept_column(features, None) == 2
    assert intercept_column(np.zeros((5, 3)), None) is None


def test_the_constant_is_a_free_candidate_on_by_default():
    public = with_intercept(*PUBLIC)
    with parts(1200, seed=1) as (train, validation):
        model = selector(epsilon=2.0).fit(train, validation, public)
        assert model.candidate_names_ == [SOURCE_ONLY, PUBLIC_CONSTANT, "noisy_gd"]
        assert set(model.budget_plan_) == {"noisy_gd", "selection"}  # it costs nothing
        assert_ledgers_hold_the_plan(model, model.privacy_, 2.0)
    arrays = model.model_arrays()
    assert candidate_names(arrays["candidate_ids"]) == model.candidate_names_
    np.testing.assert_array_equal(model.candidates_[1], public_constant_model(
        public.features, public.labels, "logistic", 10.0, NAMES))
    with parts(600, seed=1) as (train, validation):
        off = selector(epsilon=2.0, constant_candidate=False).fit(train, validation, public)
    assert off.candidate_names_ == [SOURCE_ONLY, "noisy_gd"]
    with parts(300, seed=1) as (train, validation):  # no intercept column: no constant
        assert selector(selection_score="loss").fit(train, validation,
                                                    PUBLIC).candidate_names_ == [
            SOURCE_ONLY, "noisy_gd"]


def test_the_constant_is_delivered_where_the_target_is_its_majority_label():
    """A target whose labels are all the public majority label: the
    source-only model, whose public direction fails on the target, loses to
    the free constant, and noisy GD with a tiny step barely leaves zero."""
    public = with_intercept(*PUBLIC)
    labels = np.where(public.features[:, :-1] @ np.ones(DIM - 1) > 0.3, 1.0, -1.0)
    public = Dataset(public.features, labels, NAMES)
    assert np.mean(labels < 0) > 0.6
    features = np.random.default_rng(3).normal(size=(3000, DIM)) / np.sqrt(DIM)
    data = [with_intercept(features[rows], -np.ones(len(rows)))
            for rows in np.array_split(np.arange(3000), 3)]
    with LocalFederation.from_datasets(data, noise_seed=3, epsilon_cap=20.0,
                                       delta_cap=1e-3) as federation:
        # Under the loss score (under the error score noisy GD, predicting
        # the same label everywhere, ties with the constant).
        model = selector(epsilon=3.0, candidates="noisy_gd:learning_rate=0.01",
                         selection_score="loss").fit(federation, None, public)
    assert model.chosen_ == PUBLIC_CONSTANT
    assert model.noisy_losses_[1] < model.noisy_losses_[0]


GRID = "noisy_gd:iterations=8, pncnvx_adap_smooth:alpha=0.2, pncnvx_adap_smooth:alpha=0.8"


def test_a_grid_is_one_candidate_per_setting_each_adapter_on_its_own_chain():
    model = selector(epsilon=2.0, candidates=GRID, adapter_iterations=5)
    with LocalFederation.from_datasets(sites(900, 2), noise_seed=2, epsilon_cap=20.0,
                                       delta_cap=1e-3) as federation:
        model.fit(federation, None, PUBLIC)
        for site in federation.sites:
            assert chain_names(site._job_states[federation.job_id]) == [
                "pncnvx_adap_smooth-2", "pncnvx_adap_smooth-3"]
        assert_ledgers_hold_the_plan(model, model.privacy_, 2.0)
    names = ["noisy_gd:iterations=8", "pncnvx_adap_smooth:alpha=0.2",
             "pncnvx_adap_smooth:alpha=0.8"]
    assert model.candidate_names_ == [SOURCE_ONLY, *names]
    assert set(model.budget_plan_) == {*names, "selection"}
    assert model.learners_[names[0]].iterations == 8
    assert [model.learners_[n].alpha for n in names[1:]] == [0.2, 0.8]
    assert model.learners_[names[1]].step_sizes == "noise_aware_smooth"
    # the job's result (numbers) maps back to the settings through its public candidates
    arrays = model.model_arrays()
    full = candidate_names(arrays["candidate_ids"], GRID)
    assert full == model.candidate_names_
    chosen = full[int(arrays["best_index"])]
    assert chosen == model.chosen_
    np.testing.assert_array_equal(arrays["weights"], model.candidates_[model.best_index_])
    if chosen != SOURCE_ONLY:
        np.testing.assert_array_equal(arrays["weights"], model.learners_[chosen].coef_)


@pytest.mark.parametrize("candidates, message", [
    ("pncnvx_adap_smooth:alpha=1.5", r"alpha must be .*got '1.5'"),
    ("noisy_gd:iterations=0", "iterations must be"),
    ("noisy_gd:alpha=0.5", r"noisy_gd takes \['iterations', 'learning_rate'\]"),
    ("pncnvx_adap:step_scale", "name=value"),
    ("pncnvx_adap:alpha=0.2:alpha=0.3", "twice"),
    ("pncnvx_adap:alpha=0.2,pncnvx_adap:alpha=.2", "same settings twice"),
    (",".join(f"noisy_gd:iterations={t}" for t in range(1, MAX_PRIVATE_CANDIDATES + 2)),
     "more than 8"),
    ("public_constant", "constant_candidate"),
])
def test_a_bad_grid_is_refused_at_launch_and_before_any_query(candidates, message):
    spec = pb.JobSpec(algorithm="selected_adaptation", epsilon=1.0, delta=1e-6,
                      sites=["a", "b"], seed=0)
    params_to_proto({"loss": "logistic", "radius": 8.0, "candidates": candidates},
                    spec.hyperparameters)
    with pytest.raises(ConfigError, match=message):
        check_estimator(spec, hyperparameters(spec), has_public_source=True)
    with parts(60, seed=0) as (train, validation):
        with pytest.raises(InvalidParameterError, match=message):
            selector(candidates=candidates).fit(train, validation, PUBLIC)
        assert not train.privacy_spent()["site-1"].mechanisms


def test_adapter_iterations_auto_and_numbers_parse_as_the_job_file_would():
    specs = parse_candidates("pcnvx_adap:iterations=auto:penalty=0,noisy_gd:learning_rate=2e-1")
    assert specs[0].settings == {"adapter_iterations": "auto", "penalty": 0}
    assert specs[1].settings == {"learning_rate": 0.2}
    assert [s.chain for s in specs] == ["pcnvx_adap-1", "noisy_gd-2"]


def test_the_error_score_counts_validation_errors():
    """selection_score="error": without noise (the oracle), each candidate's
    score is its error rate on the validation records; with noise the
    ledgers still hold the calibrated plan."""
    with LocalFederation.from_datasets(sites(900, 4), noise_seed=4, epsilon_cap=np.inf,
                                       delta_cap=0.5, allow_non_private=True) as federation:
        model = selector(epsilon=np.inf, delta=0.0, selection_score="error").fit(
            federation, None, PUBLIC)
        part = RecordPart("validation", 0.25, federation.job_id)
    validation = [RecordSplitter(data).records(part) for data in sites(900, 4)]
    features = np.concatenate([p.features for p in validation])
    labels = np.concatenate([p.labels for p in validation])
    errors = [np.sum(np.where(features @ w >= 0, 1.0, -1.0) != labels)
              for w in model.candidates_]
    # the release's sums are the error counts (its mean divides by the parts'
    # public planned size, not their private exact one)
    np.testing.assert_allclose(model.noisy_losses_ * model.num_validation_records_, errors,
                               atol=0.5)
    assert model.loss_bound_ == 1.0
    with parts(600, seed=4) as (train, validation):
        noisy = selector(epsilon=2.0, selection_score="error").fit(train, validation, PUBLIC)
        assert_ledgers_hold_the_plan(noisy, noisy.privacy_, 2.0)


def test_the_error_score_is_for_classifiers_only():
    with parts(60, seed=0) as (train, validation):
        with pytest.raises(InvalidParameterError, match="selection_score 'error'"):
            selector(loss="squared", selection_score="error").fit(train, validation, PUBLIC)
        assert not train.privacy_spent()["site-1"].mechanisms


def majority_over_source_only(seed):
    """(public source, job's sites, test) of a classification shift where the
    majority label (+1 on both sides, about 88%) is far more accurate on the
    target than the source-only model: the source's labels follow x_0, the
    target's x_1, and the target's x_0 is shifted by -3, where source-only
    predicts -1 (about 20% accurate there); an intercept column last. The
    gap, about 200 of the 300 validation records, is well above the error
    release's resolution at epsilon 1 (about 130 records)."""
    rng = np.random.default_rng(seed)

    def draw(n, source):
        features = np.column_stack([rng.normal(size=(n, DIM - 1)), np.full(n, 0.5)])
        if not source:
            features[:, 0] -= 3.0
        score = features[:, 0] if source else features[:, 1]
        labels = np.where(score + 1.2 + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
        return features, labels

    public = Dataset(*draw(500, True), NAMES)
    target = draw(1200, False)
    datasets = [Dataset(target[0][rows], target[1][rows], NAMES)
                for rows in np.array_split(np.arange(1200), 3)]
    return public, datasets, draw(4000, False)


def test_a_classifier_is_not_less_accurate_than_the_majority_label_where_it_beats_source_only():
    public, datasets, (features, labels) = majority_over_source_only(seed=3)
    accuracy = {}
    with LocalFederation.from_datasets(datasets, noise_seed=3, epsilon_cap=20.0,
                                       delta_cap=1e-3) as federation:
        model = SelectedAdaptation(loss="logistic", radius=10.0, epsilon=1.0, delta=1e-5,
                                   iterations=20).fit(federation, None, public)
    for name, weights in zip(model.candidate_names_, model.candidates_, strict=True):
        accuracy[name] = np.mean(np.where(features @ weights >= 0, 1.0, -1.0) == labels)
    delivered = np.mean(np.where(features @ model.coef_ >= 0, 1.0, -1.0) == labels)
    assert model.selection_score_ == "error"
    assert accuracy[PUBLIC_CONSTANT] > accuracy[SOURCE_ONLY] + 0.5
    assert delivered >= accuracy[PUBLIC_CONSTANT] - 0.01, (model.chosen_, accuracy)


def test_a_public_source_without_a_majority_label_gives_the_error_score_no_constant():
    # Both labels equally frequent: the constant fits to exactly 0, which
    # predicts +1 everywhere but scores log 2 on every record whatever its
    # label; the error score cannot count its errors, the loss score keeps it.
    labels = np.where(np.arange(len(PUBLIC[1])) % 2 == 0, 1.0, -1.0)
    public = with_intercept(PUBLIC[0], labels)
    assert not np.any(public_constant_model(public.features, labels, "logistic", 10.0, NAMES))
    with parts(600, seed=5) as (train, validation):
        model = selector(epsilon=2.0).fit(train, validation, public)
        assert model.candidate_names_ == [SOURCE_ONLY, "noisy_gd"]
        assert_ledgers_hold_the_plan(model, model.privacy_, 2.0)
    with parts(300, seed=5) as (train, validation):
        loss = selector(selection_score="loss").fit(train, validation, public)
    assert loss.candidate_names_ == [SOURCE_ONLY, PUBLIC_CONSTANT, "noisy_gd"]


def test_the_error_scores_resolution_reads_the_noise_its_release_carried():
    # With collusion tolerance the secure sum carries sqrt(K / (K - t)) times
    # the calibrated noise; the promise "within the resolution" must read it.
    with LocalFederation.from_datasets(sites(600, 4), noise_seed=4, epsilon_cap=20.0,
                                       delta_cap=1e-3, collusion_tolerance=1) as federation:
        model = selector(epsilon=2.0, selection_score="error").fit(
            federation, None, with_intercept(*PUBLIC))
    assert model.selection_resolution_ * model.num_validation_records_ == pytest.approx(
        model.margin_)
