"""Per-site releases and selections at one site and in-process."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.validation_loss import clipped_losses
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    NoNoise,
    ReportNoisyMin,
)
from tests.synthetic_data import synthetic_dataset

DIM = 4
CANDIDATES = np.array([[1.0, -1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 3.0, 3.0, 3.0]])
SCORES = {"candidates": CANDIDATES, "loss": "logistic", "loss_bound": 4.0}


def _federation(num_sites: int, **policy) -> LocalFederation:
    datasets = [synthetic_dataset(120 + 20 * k, DIM, seed=k) for k in range(num_sites)]
    policy.setdefault("epsilon_cap", 1e6)
    return LocalFederation.from_datasets(datasets, delta_cap=1e-6, noise_seed=7, **policy)


def _query(mechanism, form=ReleaseForm.PER_SITE, kernel="validation_loss", params=None):
    return Query("job", "q1", kernel, dict(SCORES if params is None else params), mechanism,
                 form=form)


def test_per_site_answers_carry_each_sites_own_sum_with_the_full_noise():
    # sigma = 1 on the record count of each site: a secure-sum share among 3
    # sites would have variance 1/3; a per-site answer carries all of it.
    with _federation(3) as federation:
        counts = {site.name: site.num_records for site in federation.sites}
        mechanism = GaussianMechanism.single(1.0, 1.0, Adjacency.REPLACE_ONE)
        draws = {name: [] for name in counts}
        for _ in range(300):
            answer = federation.query_per_site("record_count", {}, mechanism)
            assert set(answer.participants) == set(counts)
            for name, (block,) in answer.answers.items():
                draws[name].append(float(block[0]) - counts[name])
    for name, noise in draws.items():
        variance = np.var(noise, ddof=1)
        # 300 draws: the sample variance's relative sd is ~8%; 1/3 is 8 sd away.
        assert 0.75 < variance < 1.3, (name, variance)
        assert abs(np.mean(noise)) < 4 / math.sqrt(300)


def test_per_site_without_noise_equals_each_sites_exact_sum():
    with _federation(3, epsilon_cap=math.inf, allow_non_private=True) as federation:
        kernel = get_kernel("validation_loss")
        params = kernel.Params.from_wire(SCORES, DIM)
        answer = federation.query_per_site("validation_loss", SCORES,
                                           NoNoise((math.sqrt(3) * 4.0,)))
        for site in federation.sites:
            (exact,) = kernel.compute(site._data, params, {})
            np.testing.assert_allclose(answer.answers[site.name][0], exact, atol=2**-30)


def test_selection_at_a_single_site_picks_the_best_candidate_and_is_charged():
    with _federation(1) as federation:
        site = federation.sites[0]
        losses = clipped_losses(site._data.features, site._data.labels,
                                get_kernel("validation_loss").Params.from_wire(SCORES, DIM))
        best = int(np.argmin(losses.sum(axis=0)))
        mechanism = ReportNoisyMin(4.0, 0.5)  # far less noise than the score gaps
        chosen = federation.select("validation_loss", SCORES, mechanism)
        assert chosen.index == best and chosen.site_name == site.name
        (charged,) = federation.privacy_spent()[site.name].mechanisms
        # The site's own sensitivity plus one grid step for rounding the
        # scores, plus the (tiny) floating-point error of computing them.
        assert charged.kind == mechanism.kind
        (charged_sensitivity,) = charged.score_sensitivities
        step = 2.0**-federation.codec.fractional_bits
        assert 4.0 + step < charged_sensitivity < 4.0 + 2 * step


def test_a_selection_among_several_sites_is_refused_and_names_the_secure_sum_form():
    with _federation(3) as federation:
        with pytest.raises(QueryRefusedError, match="secure-sum form"):
            federation.select("validation_loss", SCORES, ReportNoisyMin(4.0, 1.0))
        assert all(not site.ledger.charges() for site in federation.sites)


def test_a_selection_sent_as_a_secure_sum_is_refused(make_site):
    site = make_site(dim=DIM, epsilon_cap=1e6)
    with pytest.raises(QueryRefusedError, match="per_site"):
        site.answer(_query(ReportNoisyMin(4.0, 1.0), ReleaseForm.SECURE_SUM), 1)
    assert not site.ledger.charges()


def test_a_selection_declaring_less_than_the_kernel_guarantees_is_refused(make_site):
    site = make_site(dim=DIM, epsilon_cap=1e6)
    with pytest.raises(QueryRefusedError, match="score sensitivity"):
        site.answer(_query(ReportNoisyMin(1.0, 1.0)), 1)


def test_a_selection_on_a_kernel_without_one_score_vector_is_refused(make_site):
    site = make_site(dim=DIM, epsilon_cap=1e6)
    params = {"feature_norm": 1.0, "label_bound": 1.0}
    with pytest.raises(QueryRefusedError, match="not one vector of scores"):
        site.answer(_query(ReportNoisyMin(100.0, 1.0), kernel="second_moments", params=params),
                    1)


def test_per_site_releases_among_several_sites_follow_the_policy(make_site):
    forbidding = make_site(dim=DIM, epsilon_cap=1e6, allow_per_site_releases=False)
    mechanism = GaussianMechanism.single(1.0, 1.0, Adjacency.REPLACE_ONE)
    query = _query(mechanism, kernel="record_count", params={})
    with pytest.raises(QueryRefusedError, match="allow_per_site_releases"):
        forbidding.answer(query, 3)
    assert not forbidding.ledger.charges()
    # Alone, a per-site answer is what a secure sum of one site would show anyway.
    forbidding.answer(query, 1)
    assert len(forbidding.ledger.charges()) == 1


# --- sensitivity of a selection on adversarial neighbours ------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from privadapt.client.ledger.privacy_ledger import PrivacyLedger  # noqa: E402
from privadapt.client.policy import SitePolicy  # noqa: E402
from privadapt.client.site import Site  # noqa: E402
from privadapt.common.data.dataset import Dataset  # noqa: E402
from privadapt.common.numerics.fixed_point import FixedPointCodec  # noqa: E402

_FINITE = st.floats(-1e3, 1e3, allow_nan=False)


def _site(features, labels, adjacency, tmp_path, ledger_name) -> Site:
    policy = SitePolicy("site", 1e6, 1e-6, adjacency=adjacency)
    data = Dataset(np.asarray(features, float), np.asarray(labels, float),
                   tuple(f"x{i}" for i in range(DIM)))
    return Site(data, policy, PrivacyLedger(tmp_path / f"{ledger_name}.db", policy,
                                              create=True))


@settings(max_examples=25, deadline=None)
@given(
    records=st.lists(st.tuples(st.lists(_FINITE, min_size=DIM, max_size=DIM),
                               st.sampled_from([-1.0, 1.0])), min_size=1, max_size=12),
    extreme=st.tuples(st.lists(st.floats(-1e8, 1e8, allow_nan=False), min_size=DIM,
                               max_size=DIM), st.sampled_from([-1.0, 1.0])),
    candidates=st.lists(st.lists(_FINITE, min_size=DIM, max_size=DIM), min_size=1,
                        max_size=4),
    loss=st.sampled_from(["logistic", "squared"]),
    loss_bound=st.floats(1e-3, 1e3),
    adjacency=st.sampled_from(list(Adjacency)),
    bits=st.sampled_from([16, 32, 48]),
)
def test_selection_scores_move_by_at_most_the_charged_sensitivity(
        tmp_path_factory, records, extreme, candidates, loss, loss_bound, adjacency, bits):
    tmp_path = tmp_path_factory.mktemp("neighbours")
    features = [r[0] for r in records]
    labels = [r[1] for r in records]
    if adjacency == Adjacency.REPLACE_ONE:
        other = ([extreme[0], *features[1:]], [extreme[1], *labels[1:]])
    else:
        other = ([*features, extreme[0]], [*labels, extreme[1]])
    params = {"candidates": np.array(candidates), "loss": loss, "loss_bound": loss_bound}
    query = Query("job", "q1", "validation_loss", params, ReportNoisyMin(2 * loss_bound, 1.0),
                  fractional_bits=bits, form=ReleaseForm.PER_SITE)
    codec = FixedPointCodec(bits)
    rounded, charged, refusals = [], [], []
    for name, (x, y) in (("d", (features, labels)), ("d-prime", other)):
        site = _site(x, y, adjacency, tmp_path, name)
        try:
            admitted = site._admission.admit(query, 1)
        except QueryRefusedError as err:  # e.g. a grid too fine for the range
            refusals.append(str(err))
            continue
        (scores,) = admitted.kernel.compute(site._data, admitted.params, {})
        rounded.append(codec.decode(codec.encode(scores)))
        charged.append(admitted.charged.score_sensitivities)
    assert len(refusals) in (0, 2) and len(set(refusals)) <= 1  # public, never the data's
    if refusals:
        return
    assert charged[0] == charged[1]  # public: the same whatever the data
    assert np.all(np.abs(rounded[0] - rounded[1]) <= max(charged[0]))


def test_selection_refusals_are_the_same_on_neighbours(tmp_path):
    base = synthetic_dataset(30, DIM, seed=3)
    features = base.features.copy()
    features[0] = 1e9
    for adjacency in Adjacency:
        messages = []
        for name, data in (("d", base), ("d-prime", Dataset(features, base.labels,
                                                             base.feature_names))):
            policy = SitePolicy("site", 1e6, 1e-6, adjacency=adjacency)
            site = Site(data, policy, PrivacyLedger(tmp_path / f"{name}-{adjacency}.db",
                                                    policy, create=True))
            outcome = []
            for query, participants in ((_query(ReportNoisyMin(4.0, 1.0)), 3),
                                        (_query(ReportNoisyMin(1.0, 1.0)), 1),
                                        (_query(ReportNoisyMin(4.0, 1.0),
                                                ReleaseForm.SECURE_SUM), 1)):
                with pytest.raises(QueryRefusedError) as refused:
                    site.answer(query, participants)
                outcome.append(str(refused.value))
            messages.append(outcome)
        assert messages[0] == messages[1]


def test_a_selection_below_the_policys_noise_floor_is_refused(make_site):
    # Laplace report-noisy-min of scale 1 on scores of sensitivity 4 costs
    # epsilon 8: a Laplace-equivalent multiplier 1/8, below a floor of 0.5.
    site = make_site(dim=DIM, epsilon_cap=100.0, min_noise_multiplier=0.5)
    with pytest.raises(QueryRefusedError, match=r"below the policy's minimum 0\.5"):
        site.answer(_query(ReportNoisyMin(4.0, 1.0)), 1)
    assert not site.ledger.charges()
    site.answer(_query(ReportNoisyMin(4.0, 20.0)), 1)  # epsilon 0.4: multiplier 2.5
    assert len(site.ledger.charges()) == 1


def test_per_site_releases_and_selections_do_not_depend_on_the_collusion_tolerance():
    # Each site adds the full noise itself, so t (the colluders a noise share
    # must survive) plays no part: a job with t = 1 may still ask them.
    with _federation(1, collusion_tolerance=1) as federation:
        federation.collusion_tolerance = 1
        federation.select("validation_loss", SCORES, ReportNoisyMin(4.0, 8.0))
        mechanism = GaussianMechanism.single(1.0, 1.0, Adjacency.REPLACE_ONE)
        federation.query_per_site("record_count", {}, mechanism)
        with pytest.raises(QueryRefusedError, match="collusion tolerance"):
            federation.query("record_count", {}, mechanism)
