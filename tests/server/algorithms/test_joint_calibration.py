"""calibrate_scale: the largest common scale of a plan's sub-budgets whose
releases compose, by the ledgers' accountant, to at most epsilon; within the
tolerance below it; never above; bad input refused with a clear message."""

import math

import pytest

from privadapt.common.accounting.accountant import AccountingMethod, epsilon_spent
from privadapt.common.accounting.analytic_gaussian import gaussian_sigma
from privadapt.common.data.record_parts import TRAIN, RecordPart
from privadapt.common.federation import ReleaseForm
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, LaplaceMechanism, NoNoise
from privadapt.server.algorithms.joint_calibration import calibrate_scale, composed_epsilon
from privadapt.server.federation.planning import PlannedRelease

EPSILON, DELTA = 1.0, 1e-5


# On a record part a site charges record_count's add/remove sensitivity 1
# (on every record, under replace-one, a count costs nothing).
PART = RecordPart(TRAIN, 0.25, "t")


def release(mechanism):
    return PlannedRelease("record_count", {}, mechanism, ReleaseForm.SECURE_SUM, PART)


def basic_plan(count, epsilon=EPSILON, delta=DELTA):
    """``count`` Gaussian steps, each calibrated alone to (c epsilon / count,
    delta / count): a plan split by basic composition, as a job's is."""
    def releases_at(scale):
        multiplier = gaussian_sigma(scale * epsilon / count, delta / count)
        return [release(GaussianMechanism.single(1.0, multiplier))] * count
    return releases_at


@pytest.mark.parametrize("count", [2, 10, 300])
def test_the_scale_spends_epsilon_within_the_tolerance_and_never_more(count):
    result = calibrate_scale(basic_plan(count), epsilon=EPSILON, delta=DELTA, dim=3)
    assert 0.99 * EPSILON <= result.epsilon_total <= EPSILON
    assert result.scale > 1.0  # the basic split left budget unspent
    # The reported total is the accountant's on exactly the releases returned,
    # as a site charges them (its float allowance on top of the declared
    # sensitivity 1, so never below the declared mechanisms' own total).
    assert result.epsilon_total == composed_epsilon(result.releases, DELTA, 3)
    declared = epsilon_spent([r.mechanism for r in result.releases], DELTA).epsilon
    assert declared <= result.epsilon_total <= declared * (1 + 1e-6)
    assert len(result.releases) == count and result.evaluations <= 6


def test_a_tighter_tolerance_is_met():
    result = calibrate_scale(basic_plan(10), epsilon=EPSILON, delta=DELTA, dim=3,
                             tolerance=1e-4)
    assert (1 - 1e-4) * EPSILON <= result.epsilon_total <= EPSILON


def test_a_plan_over_budget_at_scale_one_is_scaled_down():
    """Plans whose basic split already exceeds epsilon (here: each step at
    four times its share) are brought under it, not refused."""
    result = calibrate_scale(basic_plan(4, epsilon=4 * EPSILON), epsilon=EPSILON,
                             delta=DELTA, dim=3)
    assert result.scale < 1.0
    assert 0.99 * EPSILON <= result.epsilon_total <= EPSILON


def test_a_pure_plan_composes_as_the_sum():
    """Laplace steps: their composition at delta is at most the pure sum, so
    the scale is at least 1 and the total is within the window."""
    def releases_at(scale):
        return [release(LaplaceMechanism(1.0, 4.0 / scale))] * 4
    result = calibrate_scale(releases_at, epsilon=EPSILON, delta=DELTA, dim=3)
    assert result.scale >= 1.0 - 1e-9 and result.epsilon_total <= EPSILON


def test_an_rdp_ledger_is_calibrated_by_rdp():
    pld = calibrate_scale(basic_plan(10), epsilon=EPSILON, delta=DELTA, dim=3)
    rdp = calibrate_scale(basic_plan(10), epsilon=EPSILON, delta=DELTA, dim=3,
                          method=AccountingMethod.RDP)
    assert rdp.scale < pld.scale  # RDP's bound is the looser: less noise removed
    assert composed_epsilon(rdp.releases, DELTA, 3, method="rdp") <= EPSILON


def test_the_largest_total_over_adjacencies_is_kept():
    """An add/remove site charges a replace-one Gaussian at half its
    sensitivity: the replace-one total is the larger and is the one held."""
    plan = basic_plan(3)(1.0)
    both = composed_epsilon(plan, DELTA, 3, (Adjacency.REPLACE_ONE, Adjacency.ADD_REMOVE_ONE))
    assert both == composed_epsilon(plan, DELTA, 3)


def test_a_release_that_never_fits_is_refused():
    def releases_at(scale):
        return [release(NoNoise((1.0,)))]
    with pytest.raises(ValueError, match="no scale of the sub-budgets"):
        calibrate_scale(releases_at, epsilon=EPSILON, delta=DELTA, dim=3)


def test_a_plan_without_cost_stops_at_the_largest_scale():
    result = calibrate_scale(lambda scale: [], epsilon=EPSILON, delta=DELTA, dim=3)
    assert result.epsilon_total == 0.0 and result.scale >= 1e6 and result.releases == ()


@pytest.mark.parametrize("kwargs, message", [
    ({"epsilon": math.inf}, "epsilon must be finite and > 0"),
    ({"epsilon": 0.0}, "epsilon must be finite and > 0"),
    ({"epsilon": math.nan}, "epsilon must be finite and > 0"),
    ({"delta": 0.0}, "delta must be in \\(0, 1\\)"),
    ({"delta": 1.0}, "delta must be in \\(0, 1\\)"),
    ({"tolerance": 0.0}, "tolerance must be in \\(0, 1\\)"),
    ({"tolerance": 1.5}, "tolerance must be in \\(0, 1\\)"),
    ({"adjacencies": ()}, "at least one adjacency"),
])
def test_bad_input_is_refused_before_any_run(kwargs, message):
    runs = []

    def releases_at(scale):
        runs.append(scale)
        return []
    settings = {"epsilon": EPSILON, "delta": DELTA, "dim": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        calibrate_scale(releases_at, **settings)
    assert runs == []
