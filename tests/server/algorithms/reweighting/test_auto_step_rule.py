"""step_sizes="auto", the adapters' default step rule: the noise-aware step
where epsilon n / sqrt(d log(1/delta)) is below the iteration cap, its smooth
variant at or above it; a public plan choice, so a fit runs exactly what the
named rule runs and every site's ledger charges the same spend."""

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap
from privadapt.server.algorithms.reweighting.noise_aware_plan import (
    MAX_ITERATIONS,
    auto_step_rule,
    iteration_demand,
)
from tests.synthetic_data import synthetic_dataset

DIM = 3
DATASETS = [synthetic_dataset(60 + 10 * k, DIM, seed=k) for k in range(2)]
PUBLIC = synthetic_dataset(80, DIM, seed=42)
N = sum(len(d.labels) for d in DATASETS)
BOUNDS = dict(feature_norm=1.0, label_bound=1.0, radius=4.0)


def federation(tmp_path, name):
    return LocalFederation.from_datasets(DATASETS, epsilon_cap=40.0, delta_cap=1e-5,
                                         ledger_dir=tmp_path / name, noise_seed=5)


def test_the_rule_switches_where_the_iteration_rule_saturates():
    # epsilon n / sqrt(d log(1/delta)) = MAX_ITERATIONS exactly at this epsilon.
    edge = MAX_ITERATIONS * math.sqrt(DIM * math.log(1e5)) / N
    assert iteration_demand(edge, 1e-5, N, DIM) == pytest.approx(MAX_ITERATIONS)
    assert auto_step_rule(edge * 0.99, 1e-5, N, DIM) == "noise_aware"
    assert auto_step_rule(edge * 1.01, 1e-5, N, DIM) == "noise_aware_smooth"
    assert auto_step_rule(1.0, 1e-5, 10**6, DIM) == "noise_aware_smooth"
    assert auto_step_rule(math.inf, 0.0, N, DIM) == "noise_aware_smooth"  # curvature anyway
    assert PCnvxAdap.parameter_defaults()["step_sizes"] == "auto"
    assert PNCnvxAdap.parameter_defaults()["step_sizes"] == "auto"


@pytest.mark.parametrize(("epsilon", "rule"), [(3.0, "noise_aware"),
                                               (12.0, "noise_aware_smooth")])
def test_auto_runs_the_named_rule_and_charges_the_same(tmp_path, epsilon, rule):
    settings = dict(alpha=0.4, epsilon=epsilon, delta=1e-5, **BOUNDS)
    assert auto_step_rule(epsilon, 1e-5, N, DIM) == rule
    auto = PCnvxAdap(**settings).fit(federation(tmp_path, "auto"), PUBLIC)
    named = PCnvxAdap(**settings, step_sizes=rule).fit(federation(tmp_path, "named"), PUBLIC)
    assert auto.step_rule_ == named.step_rule_ == rule
    np.testing.assert_array_equal(auto.coef_, named.coef_)
    assert auto.step_sizes_ == named.step_sizes_
    other = "noise_aware" if rule == "noise_aware_smooth" else "noise_aware_smooth"
    changed = PCnvxAdap(**settings, step_sizes=other).fit(federation(tmp_path, "other"), PUBLIC)
    # Only the w step differs between the rules: the releases and their charge do not.
    assert {n: p.job.epsilon for n, p in changed.privacy_.items()} == {
        n: p.job.epsilon for n, p in auto.privacy_.items()}
    assert all(p.job.epsilon <= epsilon for p in auto.privacy_.values())


def test_explicit_step_sizes_are_reported_as_given(tmp_path):
    model = PNCnvxAdap(alpha=0.4, epsilon=3.0, delta=1e-5, iterations=3, **BOUNDS,
                       step_sizes="curvature")
    model.fit(federation(tmp_path, "c"), PUBLIC)
    assert model.step_rule_ == "curvature"
