"""A DP Gaussian mixture of the private source, sampled: seed 001's stand-in
for its DP-GAN baseline (../shared/seeds/001_bc09c11f93585935.txt, Section 6).

The paper trained DP-GAN (Xie et al. 2018, the dpwgan implementation) on S and
drew 100 i.i.d. samples from it as the source for AkM. A GAN needs torch,
which this project does not take (DESIGN.md section 8), so this baseline is a
different DP generative model with the same role: **a diagonal Gaussian
mixture fitted by hard-assignment DP EM** (DP Lloyd for the means, then one
release of per-component counts, sums and squared sums), from which
``n_samples`` points are drawn. It is named for what it is; its numbers are
not DP-GAN's.

Steps (T = ``iterations`` releases in all, kernel ``nearest_target_sums``):

1. T - 1 DP Lloyd rounds (:mod:`.private_lloyd`) from public initial centres
   move K = ``n_components`` centres towards the records' clusters;
2. one last release at the final centres carries, per centre, the count, the
   coordinate sums and the squared-coordinate sums (the kernel's moment
   columns), its budget split ``count_share`` to the counts and the rest
   evenly between sums and squared sums;
3. post-processing at the coordinator: component j with noisy count c_j above
   the threshold (default twice a count's noise standard deviation) gets
   weight c_j / sum c, mean mu_j = s_j / c_j (projected onto the clip ball)
   and per-coordinate variance m_j / c_j - mu_j^2 clipped to
   [``variance_floor``, r^2]; ``n_samples`` points are drawn from the mixture
   with the public seed and clipped to the ball.

Privacy: as :mod:`.private_lloyd`: T releases at epsilon / T (Laplace, pure
epsilon-DP in all) or rho / T (Gaussian, rho-zCDP in all), add/remove
adjacency. Sampling is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.mechanisms import Mechanism
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.source_target_clustering.private_lloyd import (
    CellStatistics,
    PrivacyPlan,
    column_weights,
    lloyd_rounds,
    noisy_cell_statistics,
    uniform_ball_points,
)


@dataclass
class PrivateMixtureResult:
    """The fitted mixture (``weights`` (J,), ``means`` (J, d), ``variances``
    (J, d) of the J kept components), its ``samples`` (n_samples, d), the
    centres each release was asked at (``history``), one mechanism per
    release (``mechanisms``) and each site's ledger (``privacy``)."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray
    samples: np.ndarray
    threshold: float
    history: list[np.ndarray]
    mechanisms: list[Mechanism]
    plan: PrivacyPlan
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def mixture_from_cells(cells: CellStatistics, threshold: float, clip_norm: float,
                       variance_floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, means, variances) of the components whose noisy count exceeds
    ``threshold`` (step 3 of the module docstring)."""
    assert cells.moments is not None
    kept = cells.counts > threshold
    counts = cells.counts[kept]
    means = clip_rows_to_norm(cells.sums[kept] / counts[:, None], clip_norm)
    variances = np.clip(cells.moments[kept] / counts[:, None] - means**2, variance_floor,
                        clip_norm**2)
    weights = counts / counts.sum() if counts.size else counts
    return weights, means, variances


def sample_mixture(weights: np.ndarray, means: np.ndarray, variances: np.ndarray,
                   n_samples: int, clip_norm: float, rng: np.random.Generator) -> np.ndarray:
    """``n_samples`` draws from the diagonal mixture, clipped to the ball; an
    empty (0, d) array when no component was kept."""
    if weights.size == 0:
        return np.zeros((0, means.shape[1]))
    components = rng.choice(weights.size, size=n_samples, p=weights)
    draws = means[components] + np.sqrt(variances[components]) * rng.normal(
        size=(n_samples, means.shape[1]))
    return clip_rows_to_norm(draws, clip_norm)


def private_gaussian_mixture(
    federation: Federation, *, n_components: int, iterations: int,
    epsilon: float | None, rho: float | None, clip_norm: float,
    count_share: float, n_samples: int, min_count: float | None,
    variance_floor: float, initial_centres: np.ndarray | None = None,
    seed: int | None,
) -> PrivateMixtureResult:
    """Fit the DP mixture and sample it (module docstring)."""
    plan = PrivacyPlan.split(epsilon, rho, iterations)
    dim = federation.dim
    rng = np.random.default_rng(seed)
    centres = (uniform_ball_points(n_components, dim, clip_norm, rng)
               if initial_centres is None else np.array(initial_centres, dtype=float))
    if centres.shape != (n_components, dim):
        raise ValueError(f"initial_centres must have shape ({n_components}, {dim}), "
                         f"got {centres.shape}")
    history: list[np.ndarray] = []
    mechanisms: list[Mechanism] = []
    if iterations > 1:
        centres, _, _ = lloyd_rounds(
            federation, centres, iterations - 1, clip_norm=clip_norm,
            weights=column_weights(plan.noise, dim, clip_norm, count_share), plan=plan,
            min_count=min_count, history=history, mechanisms=mechanisms)
    history.append(centres)
    rest = (1.0 - count_share) / 2
    cells = noisy_cell_statistics(
        federation, centres, clip_norm=clip_norm,
        weights=column_weights(plan.noise, dim, clip_norm, count_share, rest), plan=plan)
    mechanisms.append(cells.mechanism)
    threshold = 2 * cells.count_noise_std if min_count is None else min_count
    weights, means, variances = mixture_from_cells(cells, threshold, clip_norm, variance_floor)
    samples = sample_mixture(weights, means, variances, n_samples, clip_norm, rng)
    return PrivateMixtureResult(weights, means, variances, samples, threshold, history,
                                mechanisms, plan, federation.privacy_spent())
