"""The exact_discrepancy kernel: n d-hat matches a brute-force supremum, and its
stated sensitivity holds on neighbouring datasets with adversarial records and
adversarial public moments."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.exact_discrepancy import ExactDiscrepancyParams
from privadapt.common.losses import squared_loss_range
from privadapt.common.mechanisms import Adjacency

DIM = 3
RADIUS, FEATURE_NORM, LABEL_BOUND = 1.5, 2.0, 1.0
BOUND = (RADIUS * FEATURE_NORM + LABEL_BOUND) ** 2
RNG = np.random.default_rng(7)
BASE_FEATURES = RNG.normal(size=(25, DIM))
BASE_LABELS = RNG.normal(size=25)


def clipped(features, labels):
    norms = np.linalg.norm(features, axis=1)
    features = features * np.minimum(1.0, FEATURE_NORM / np.maximum(norms, 1e-300))[:, None]
    return features, np.clip(labels, -LABEL_BOUND, LABEL_BOUND)


def moments(features, labels):
    z = np.column_stack(clipped(features, labels))
    return z.T @ z / len(z)


PUBLIC_MOMENTS = moments(RNG.normal(size=(40, DIM)) + 0.7, RNG.normal(size=40) * 2)
KERNEL = get_kernel("exact_discrepancy")


def params(public=PUBLIC_MOMENTS, radius=RADIUS):
    return ExactDiscrepancyParams(FEATURE_NORM, LABEL_BOUND, radius, public)


def dataset(features, labels):
    features = np.atleast_2d(np.asarray(features, float))
    return Dataset(features, np.asarray(labels, float), tuple(f"x{i}" for i in range(DIM)))


def release(features, labels, public=PUBLIC_MOMENTS):
    (value,) = KERNEL.compute(dataset(features, labels), params(public), {})
    return float(value[0])


coordinate = st.one_of(
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1e300, -1e300, 1e-300, 1e150, -1e150]),
)
record = st.tuples(st.lists(coordinate, min_size=DIM, max_size=DIM), coordinate)
symmetric = st.lists(st.floats(-50, 50), min_size=(DIM + 1) ** 2, max_size=(DIM + 1) ** 2).map(
    lambda v: (np.reshape(v, (DIM + 1, DIM + 1)) + np.reshape(v, (DIM + 1, DIM + 1)).T) / 2
)


def _clipped_moments(factor: np.ndarray, scale: float) -> np.ndarray:
    """A F^T scaled into the accepted range (feature trace <= r^2, label entry
    <= Y^2), then by ``scale`` in [0, 1]: PSD moments clipped records can have."""
    moments = factor @ factor.T
    trace, label = np.trace(moments[:-1, :-1]), moments[-1, -1]
    shrink = min(FEATURE_NORM**2 / trace if trace > 0 else 1.0,
                 LABEL_BOUND**2 / label if label > 0 else 1.0)
    return moments * shrink * scale


# Adversarial moments inside the accepted range: any PSD shape, at its limits.
clipped_public = st.builds(
    _clipped_moments,
    st.lists(st.floats(-50, 50), min_size=(DIM + 1) ** 2, max_size=(DIM + 1) ** 2).map(
        lambda v: np.reshape(v, (DIM + 1, DIM + 1))),
    st.sampled_from([1.0, 1.0 - 1e-12, 0.5, 1e-9, 0.0]),
)


def test_release_is_n_times_the_brute_force_supremum_over_the_disc():
    # Two features, so the disc ||w|| <= Lambda can be searched exhaustively.
    rng = np.random.default_rng(1)
    private_x, private_y = rng.normal(size=(30, 2)) * 0.8, rng.normal(size=30)
    public_x, public_y = rng.normal(size=(50, 2)) + 0.5, rng.normal(size=50) * 0.5 + 0.3
    public = np.column_stack(clipped(public_x, public_y))
    public_moments = public.T @ public / len(public)
    angles = np.linspace(0, 2 * np.pi, 100_001)
    radii, turns = np.meshgrid(np.linspace(0, RADIUS, 400), np.linspace(0, 2 * np.pi, 400))
    grid = np.vstack([RADIUS * np.column_stack([np.cos(angles), np.sin(angles)]),
                      np.column_stack([(radii * np.cos(turns)).ravel(),
                                       (radii * np.sin(turns)).ravel()])])
    px, py = clipped(private_x, private_y)
    gap = (((grid @ public[:, :2].T - public[:, 2]) ** 2).mean(axis=1)
           - ((grid @ px.T - py) ** 2).mean(axis=1))
    brute_force = np.abs(gap).max()
    data = Dataset(private_x, private_y, ("a", "b"))
    (value,) = KERNEL.compute(data, params(public_moments), {})
    assert value[0] / 30 >= brute_force - 1e-12
    assert value[0] / 30 == pytest.approx(brute_force, rel=1e-6)


def test_replace_one_sensitivity_is_attained_by_extreme_records():
    # Alone against zero public moments: a record with loss B at w = Lambda e1
    # (x = r e1, y = -Y) against one with loss 0 everywhere (x = 0, y = 0).
    zero = np.zeros((DIM + 1, DIM + 1))
    extreme = release([[FEATURE_NORM, 0, 0]], [-LABEL_BOUND], zero)
    assert extreme == pytest.approx(BOUND, rel=1e-12)
    assert release([[0, 0, 0]], [0.0], zero) == 0.0
    assert KERNEL.sensitivities(params(zero), Adjacency.REPLACE_ONE, "l2", DIM) == (BOUND,)


@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, 24), replacement=record)
def test_replacing_one_record_moves_release_at_most_the_sensitivity(position, replacement):
    features, label = replacement
    neighbour_features, neighbour_labels = BASE_FEATURES.copy(), BASE_LABELS.copy()
    neighbour_features[position], neighbour_labels[position] = features, label
    change = release(neighbour_features, neighbour_labels) - release(BASE_FEATURES, BASE_LABELS)
    (bound,) = KERNEL.l2_sensitivities(params(), Adjacency.REPLACE_ONE)
    assert abs(change) <= bound * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(extra=record)
def test_adding_one_record_moves_release_at_most_the_sensitivity(extra):
    features, label = extra
    change = (release(np.vstack([BASE_FEATURES, features]), np.append(BASE_LABELS, label))
              - release(BASE_FEATURES, BASE_LABELS))
    (bound,) = KERNEL.l2_sensitivities(params(), Adjacency.ADD_REMOVE_ONE)
    assert bound <= BOUND  # honest public losses lie in [0, B] too
    assert abs(change) <= bound * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(public=symmetric)
def test_public_moments_no_clipped_records_can_have_are_refused(public):
    eigenvalues = np.linalg.eigvalsh(public)
    possible = (eigenvalues[0] >= -1e-6 and np.trace(public[:-1, :-1]) <= FEATURE_NORM**2
                and public[-1, -1] <= LABEL_BOUND**2)
    if not possible:
        with pytest.raises(ValueError, match="public_moments"):
            params(public)


def test_moments_scaled_as_in_the_floating_point_attack_are_refused():
    # Moments of size 2^28 / n made one ulp of n M_pub 89 times B.
    with pytest.raises(ValueError, match="second moments of records clipped"):
        params(np.full((DIM + 1, DIM + 1), 2.0**28 / 25))


@settings(max_examples=60, deadline=None)
@given(public=clipped_public, extra=record, position=st.integers(0, 24))
def test_sensitivity_holds_for_adversarial_public_moments(public, extra, position):
    features, label = extra
    base = release(BASE_FEATURES, BASE_LABELS, public)
    added = release(np.vstack([BASE_FEATURES, features]), np.append(BASE_LABELS, label), public)
    replaced_x, replaced_y = BASE_FEATURES.copy(), BASE_LABELS.copy()
    replaced_x[position], replaced_y[position] = features, label
    replaced = release(replaced_x, replaced_y, public)
    (add_remove,) = KERNEL.l2_sensitivities(params(public), Adjacency.ADD_REMOVE_ONE)
    (replace,) = KERNEL.l2_sensitivities(params(public), Adjacency.REPLACE_ONE)
    scale = 1e-9 * (1 + KERNEL.max_abs_sum(params(public), 26))  # the solver's rounding
    assert abs(added - base) <= add_remove + scale
    assert abs(replaced - base) <= replace + scale
    assert max(base, added, replaced) <= KERNEL.max_abs_sum(params(public), 26)


def test_public_range_is_the_loss_range_of_the_public_moments():
    low, high = squared_loss_range(PUBLIC_MOMENTS, RADIUS)
    assert 0 <= low <= high <= BOUND


def test_public_moments_that_are_not_symmetric_are_read_as_their_symmetric_part():
    upper = np.triu(np.ones((DIM + 1, DIM + 1)), 1)
    lopsided = PUBLIC_MOMENTS + upper - upper.T  # an antisymmetric part only
    symmetric_part = (lopsided + lopsided.T) / 2
    assert release(BASE_FEATURES, BASE_LABELS, lopsided) == pytest.approx(
        release(BASE_FEATURES, BASE_LABELS, symmetric_part), rel=1e-12)


def test_clip_bounds_are_reported_for_the_site_policy():
    assert KERNEL.clip_bounds(params()) == {"clip_norm": FEATURE_NORM,
                                            "label_bound": LABEL_BOUND}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"public_moments": np.eye(DIM)}, "public_moments"),
        ({"public_moments": [[0.0] * (DIM + 1)] * (DIM + 1)}, "public_moments"),
        ({"public_moments": np.full((DIM + 1, DIM + 1), np.nan)}, "finite"),
        ({"radius": 0.0}, "radius"),
        ({"feature_norm": float("inf")}, "feature_norm"),
    ],
)
def test_malformed_params_are_rejected(changes, message):
    with pytest.raises(ValueError, match=message):
        KERNEL.Params.from_wire({**params().to_wire(), **changes}, DIM)


def test_a_site_process_knows_the_kernel_by_name():
    # A site imports only the kernels package; the kernel must register there.
    code = ("from privadapt.common.kernels import registered_kernels; "
            "assert 'exact_discrepancy' in registered_kernels()")
    subprocess.run([sys.executable, "-c", code], check=True)
