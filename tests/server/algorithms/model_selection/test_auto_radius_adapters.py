"""radius="auto" on PCnvxAdap and PNCnvxAdap (server/algorithms/model_selection/auto_radius.py):
with a public source one model descends, on its guess's site-side chain, in
the largest ball around the source-only model and the other guesses are its
projections; on a shifted target the delivered offset beats the source-only
model, the ledger holds exactly the plan (the training at c epsilon/2, the
paired selection at c epsilon/2, c the joint calibration's scale) and the adapter's
epsilon, the free source-only model leads the candidates and is delivered
when it is best, two adapters share a
job only on distinct chains, and what the selection cannot score is refused."""

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.accounting.accountant import epsilon_spent
from privadapt.common.errors import QueryRefusedError
from privadapt.common.kernels.reweighted_chains import chain_names
from privadapt.common.mechanisms import GaussianMechanism
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.model_selection.grid_search import guess_chain
from privadapt.server.algorithms.public_erm import fit_linear
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap

DIM, DELTA, NORM = 4, 1e-5, 4.0
NAMES = tuple(f"x{i}" for i in range(DIM))


def sphere(rng, n):
    features = rng.normal(size=(n, DIM))
    return features / np.linalg.norm(features, axis=1, keepdims=True)


def target_and_source(seed, n=3000, m=400, angle=0.5):
    """A target y = w*.x + noise with ||w*|| = NORM; a public source from a w
    of the same norm at ``angle`` (radians) from w* (0: no shift)."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=DIM)
    truth *= NORM / np.linalg.norm(truth)
    other = rng.normal(size=DIM)
    other -= truth * (other @ truth) / (truth @ truth)
    other *= NORM / np.linalg.norm(other)
    source_weights = np.cos(angle) * truth + np.sin(angle) * other
    features, public = sphere(rng, n), sphere(rng, m)
    target = Dataset(features, features @ truth + 0.3 * rng.normal(size=n), NAMES)
    source = Dataset(public, public @ source_weights + 0.3 * rng.normal(size=m), NAMES)
    return target, source, truth


def adapter(**params):
    settings = {"alpha": 0.1, "epsilon": 8.0, "delta": DELTA, "feature_norm": 1.0,
                "label_bound": NORM + 2, "radius": "auto", "iterations": 15,
                "num_guesses": 4}
    return PCnvxAdap(**{**settings, **params})


def sites(target, seed, num_sites=1):
    parts = [Dataset(target.features[rows], target.labels[rows], NAMES)
             for rows in np.array_split(np.arange(target.num_records), num_sites)]
    return LocalFederation.from_datasets(parts, epsilon_cap=20.0, delta_cap=1e-3,
                                         noise_seed=seed)


def test_the_delivered_offset_beats_the_free_source_model_on_a_shifted_target():
    """A shifted source (w at 0.5 rad from w*): the adapter, started at the
    source's fit, moves towards w*, and the search delivers one of its
    offsets around the source-only model, closer to w* than that model."""
    for seed in range(2):
        target, source, truth = target_and_source(seed)
        with sites(target, seed) as federation:
            model = adapter().fit(federation, source)
        search = model.norm_search_
        assert search.candidate_names_[search.best_index_].startswith("guess"), seed
        center = search.candidates_[0]
        assert np.linalg.norm(model.coef_ - center) <= model.radius_ * (1 + 1e-12)
        source_error = np.linalg.norm(center - truth)
        assert np.linalg.norm(model.coef_ - truth) < source_error, seed


def test_the_offset_model_runs_on_its_guess_chain_and_the_ledger_is_the_plan():
    target, source, _ = target_and_source(11, n=1500)
    model = adapter(epsilon=6.0, num_guesses=3)
    with sites(target, 11) as federation:
        model.fit(federation, source)
        (site,) = federation.sites
        assert chain_names(site._job_states[federation.job_id]) == ["g3"]
    (spent,) = model.privacy_.values()
    search = model.norm_search_
    (trained,) = search.learners_  # one model, in the largest ball; the others project it
    assert trained.chain == "g3"
    center = search.candidates_[0]
    assert trained.radius == pytest.approx(2 * np.linalg.norm(center))  # ||w_src|| + rho_3
    *trainings, histogram, paired = spent.mechanisms
    assert len(trainings) == trained.iterations_
    assert all(isinstance(m, GaussianMechanism) for m in trainings)
    scale = search.budget_scale_
    assert scale > 1.0  # the joint calibration spends what basic composition left
    # The training at (c epsilon / 2, delta / 2), the selection at c epsilon / 2.
    training = epsilon_spent(trainings, DELTA / 2).epsilon
    assert training <= 3.0 * scale and training == pytest.approx(3.0 * scale, rel=2e-3)
    # The paired score's clips from a histogram release, then the paired
    # release: together one Gaussian at c epsilon / 2.
    selection = epsilon_spent([histogram, paired], DELTA / 2).epsilon
    assert selection == pytest.approx(3.0 * scale, rel=2e-3)
    assert 0.98 * 6.0 <= spent.job.epsilon <= 6.0
    assert search.include_source_only  # the free models lead the candidates
    assert model.radius == "auto" and model.chain == ""  # the adapter itself is untouched
    assert float(model.model_arrays()["radius"]) == model.radius_


def test_when_the_source_only_model_is_best_it_is_delivered():
    """A public source from the target's own w* and few target records: the
    source-only model (free) beats every noisy guess, and the adapter hands
    it back rather than anything worse."""
    target, source, _ = target_and_source(3, n=300, m=2000, angle=0.0)
    model = adapter(epsilon=1.0, num_guesses=3)
    with sites(target, 3) as federation:
        model.fit(federation, source)
    free = fit_linear(source.features, source.labels, "squared", 2.0**3, None)
    assert model.norm_search_.best_index_ == 0 and model.radius_ == 0.0
    np.testing.assert_array_equal(model.coef_, free)
    np.testing.assert_array_equal(model.average_coef_, free)
    np.testing.assert_array_equal(model.last_coef_, free)


def test_two_adapters_share_a_job_only_on_distinct_chains():
    """What a selection job does with two adapter candidates: one federation
    (one job), each adapter on its own chain."""
    target, source, _ = target_and_source(5, n=600)
    numeric = {"radius": 8.0, "epsilon": 2.0}
    with sites(target, 5) as federation:
        first = adapter(chain="pcnvx", **numeric).fit(federation, source)
        second = PNCnvxAdap(alpha=0.1, epsilon=2.0, delta=DELTA, feature_norm=1.0,
                            label_bound=NORM + 2, radius=8.0, loss="squared", iterations=15,
                            chain="pncnvx").fit(federation, source)
        (site,) = federation.sites
        assert chain_names(site._job_states[federation.job_id]) == ["pcnvx", "pncnvx"]
        with pytest.raises(QueryRefusedError, match="out of order"):  # the same chain again
            adapter(chain="pcnvx", **numeric).fit(federation, source)
    assert first.coef_.shape == second.coef_.shape == (DIM,)


def test_a_numeric_radius_on_the_default_chain_is_the_adapter_as_before(tmp_path):
    target, source, _ = target_and_source(7, n=600)
    runs = []
    for chain in ("", "named"):
        with LocalFederation.from_datasets([target], epsilon_cap=20.0, delta_cap=1e-3,
                                           noise_seed=7, ledger_dir=tmp_path / (chain or "d")
                                           ) as federation:
            runs.append(adapter(radius=8.0, chain=chain).fit(federation, source))
    # The chain names the site's weights only: the same noise, the same model.
    np.testing.assert_array_equal(runs[0].coef_, runs[1].coef_)
    assert "radius" not in runs[0].model_arrays() and not hasattr(runs[0], "radius_")


@pytest.mark.parametrize(("make", "message"), [
    (lambda: PNCnvxAdap(alpha=0.1, epsilon=2.0, delta=DELTA, feature_norm=1.0,
                        label_bound=1.0, radius="auto", loss="softmax_cross_entropy",
                        num_classes=3), "cannot bound"),
    (lambda: adapter(chain="x" * 31), "no room"),
    (lambda: adapter(chain="Bad Name"), "chain"),
    (lambda: adapter(num_guesses=17), "at most 16 per job"),
])
def test_what_the_search_cannot_run_is_refused_before_any_query(make, message):
    target, source, _ = target_and_source(9, n=200)
    labels = np.abs(source.labels).astype(int) % 3  # class labels for the softmax case
    public = Dataset(source.features, labels.astype(float), NAMES) \
        if "softmax" in str(make().get_params().get("loss")) else source
    with sites(target, 9) as federation:
        with pytest.raises(InvalidParameterError, match=message):
            make().fit(federation, public)
        assert all(p.job.epsilon == 0 for p in federation.privacy_spent().values())


def test_guess_chains_are_valid_names():
    assert guess_chain("", 3) == "g3" and guess_chain("pcnvx", 12) == "pcnvx-g12"
    with pytest.raises(ValueError, match="chain"):
        guess_chain("x" * 31, 1)
