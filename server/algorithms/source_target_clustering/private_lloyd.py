"""DP Lloyd k-means over the federation: seed 001's PrivateKmeans baseline as
it is built here (../shared/seeds/001_bc09c11f93585935.txt, Section 6).

What the paper used and what this is. The paper's PrivateKmeans is Balcan et
al. 2017 ("Differentially private clustering in high-dimensional Euclidean
spaces": a private candidate set from a recursive partition, private local
search by the exponential mechanism, then a private Lloyd refinement), run on
S to 100 centres that then serve AkM as the source. That algorithm is not
built here. This is **DP Lloyd** (Blum, Dwork, McSherry and Nissim 2005, the
SuLQ k-means; in the form studied by Su, Cao, Li, Bertino and Jin 2016,
"Differentially private k-means clustering"): T rounds of

    1. every site assigns each of its records (clipped to ||x|| <= r) to the
       nearest of the K public centres and releases, per centre, its count and
       its coordinate sum (kernel ``nearest_target_sums``, the one NNA uses,
       with the centres as its public points), noised, summed
       securely across the sites;
    2. the coordinator moves each centre to noisy sum / noisy count, projected
       onto the clip ball (post-processing), where the noisy count exceeds a
       threshold, and leaves it where it is otherwise.

The output is the centres of the last round whose last noisy count exceeds the
threshold (default: twice the standard deviation of a count's noise): a
centre that holds no records would otherwise act as a fake source point for
AkM, covering targets no private point is near. That threshold is
post-processing of the released counts.

Privacy (add/remove adjacency, seed 001). Each round is one release of the
kernel's block; the T releases compose:

* ``epsilon`` (pure epsilon-DP): Laplace on each round at epsilon / T, scale =
  (charged L1 sensitivity) T / epsilon, so the ledger's pure epsilon is
  exactly epsilon (basic composition of pure DP). With ``noise="discrete"``
  the same budget is spent by the exact discrete Laplace on the federation's
  fixed-point grid (:class:`~privadapt.common.mechanisms.DiscreteLaplaceMechanism`):
  exactly pure, where the float Laplace is (epsilon, ~1e-300).
* ``rho`` (rho-zCDP): Gaussian on each round with multiplier
  z = sqrt(T / (2 rho)), i.e. rho / T per round (rho = 1 / (2 z^2) for a
  Gaussian of L2 sensitivity 1 and sigma z), rho in all (zCDP composes
  additively). With ``noise="discrete"`` the same multiplier is spent by the
  distributed discrete Gaussian
  (:class:`~privadapt.common.mechanisms.DistributedDiscreteGaussianMechanism`):
  each of the K sites adds an exact N_Z share on the federation's grid, n =
  K - t of them carrying sigma (t the federation's ``collusion_tolerance``,
  0 where it has none). Each site's ledger charges the Kairouz-Liu-Steinke
  bound for the sum, alpha rho / T + Q tau per round: rho-zCDP up to Q tau,
  which is 0 in floating point once a share's sigma exceeds 9 grid steps (a
  sigma of z times a sensitivity of thousands of steps on the grids a site
  accepts, unless the clip norm is tiny; the ledgers charge the bound
  either way). A federation whose sites drop out of a round, or whose
  collusion tolerance this cannot read (the networked one: it sets none), is
  refused by its sites rather than under-charged. The paper's zCDP version
  of its baselines ran the pure-DP algorithm at epsilon = sqrt(rho / 2)
  instead (Section 6); releasing Gaussian noise calibrated to rho directly is
  the tighter choice.

Within a round, ``count_share`` says how the round's budget splits between
the counts and the sums (Su et al. split each round's epsilon between them):
the kernel weights the count column by w so that w takes that share of the
round's L1 sensitivity w + sqrt(d) r (Laplace) or of its squared L2
sensitivity w^2 + r^2 (Gaussian); :func:`column_weights`.

The initial centres are public: drawn uniformly from the clip ball with the
seed (Su et al. also initialise independently of the data), or given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.base import NoiseKind
from privadapt.common.kernels.nearest_target_sums import NearestTargetParams, NearestTargetSums
from privadapt.common.mechanisms import (
    Adjacency,
    DiscreteLaplaceMechanism,
    LaplaceMechanism,
    Mechanism,
)
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.common.validation import check_positive

KERNEL = NearestTargetSums()
ADJACENCY = Adjacency.ADD_REMOVE_ONE  # seed 001's neighbours add or remove a record


@dataclass(frozen=True)
class PrivacyPlan:
    """How a run's budget is spent: ``queries`` releases, each with ``noise``
    at ``noise_multiplier`` (inf: no noise, simulation sites only)."""

    noise: NoiseKind
    noise_multiplier: float
    queries: int

    @classmethod
    def split(cls, epsilon: float | None, rho: float | None, queries: int,
              discrete: bool = False) -> PrivacyPlan:
        """Laplace at epsilon / ``queries`` per release (pure epsilon-DP; the
        exact discrete Laplace when ``discrete``), or Gaussian at rho /
        ``queries`` per release (rho-zCDP; the distributed discrete Gaussian
        when ``discrete``); exactly one of ``epsilon`` and ``rho`` (module
        docstring)."""
        if (epsilon is None) == (rho is None):
            raise ValueError("give exactly one of epsilon (pure DP, Laplace noise) and rho "
                             f"(zCDP, Gaussian noise); got epsilon={epsilon!r}, rho={rho!r}")
        if queries < 1:
            raise ValueError(f"a plan needs at least one query, got {queries!r}")
        if epsilon is not None:
            check_positive("epsilon", epsilon, infinity_means="inf for no noise")
            return cls("discrete_laplace" if discrete else "laplace",
                       queries / epsilon if math.isfinite(epsilon) else math.inf, queries)
        assert rho is not None
        check_positive("rho", rho, infinity_means="inf for no noise")
        multiplier = math.sqrt(queries / (2 * rho)) if math.isfinite(rho) else math.inf
        return cls("distributed_discrete_gaussian" if discrete else "gaussian", multiplier,
                   queries)


def column_weights(noise: NoiseKind, dim: int, clip_norm: float, count_share: float,
                   moment_share: float = 0.0) -> tuple[float, float | None]:
    """(w, v) for the kernel's count and moment columns so that the count takes
    ``count_share`` of a round's sensitivity budget, the moments
    ``moment_share`` and the sums the rest: shares of the L1 sensitivity
    w + sqrt(d) r + v r^2 (Laplace) or of the squared L2 one w^2 + r^2 + v^2 r^4
    (Gaussian). v is None without moments (``moment_share`` 0)."""
    sum_share = 1.0 - count_share - moment_share
    if not (0 < count_share < 1 and 0 <= moment_share < 1 and sum_share > 0):
        raise ValueError(f"count_share and moment_share must be in (0, 1) with a positive "
                         f"rest for the sums, got {count_share!r} and {moment_share!r}")
    r = clip_norm
    if noise not in ("gaussian", "distributed_discrete_gaussian"):  # the Laplaces: L1
        unit = math.sqrt(dim) * r / sum_share  # the L1 budget in units of the sums' share
        return count_share * unit, (moment_share * unit / r**2 if moment_share else None)
    unit = r**2 / sum_share
    return (math.sqrt(count_share * unit),
            math.sqrt(moment_share * unit) / r**2 if moment_share else None)


@dataclass(frozen=True)
class CellStatistics:
    """One release, read per centre: noisy counts (K,), sums (K, d), squared
    sums (K, d) or None, the mechanism it was released under, the count
    column's weight w (the count's noise is the block's divided by w) and the
    release's noise std over the mechanism's (``AggregateAnswer.noise_std_factor``:
    sqrt(K / (K - t)) with t of the K sites trusted to collude)."""

    counts: np.ndarray
    sums: np.ndarray
    moments: np.ndarray | None
    mechanism: Mechanism
    count_weight: float
    noise_std_factor: float = 1.0

    @property
    def count_noise_std(self) -> float:
        """The standard deviation of one count's noise as released (0 without noise)."""
        (scale,) = self.mechanism.noise_scales or (0.0,)
        laplace = isinstance(self.mechanism, LaplaceMechanism | DiscreteLaplaceMechanism)
        std = math.sqrt(2.0) * scale if laplace else scale
        return std * self.noise_std_factor / self.count_weight


def noisy_cell_statistics(federation: Federation, centres: np.ndarray, *, clip_norm: float,
                          weights: tuple[float, float | None], plan: PrivacyPlan
                          ) -> CellStatistics:
    """One secure-sum release of the kernel at ``centres``, read per centre."""
    count_weight, moment_weight = weights
    params = NearestTargetParams(centres, clip_norm, count_weight, moment_weight)
    dim = centres.shape[1]
    grid: dict = {}
    if plan.noise == "discrete_laplace":
        grid = {"fractional_bits": federation_grid_bits(federation)}
    elif plan.noise == "distributed_discrete_gaussian":
        grid = {"fractional_bits": federation_grid_bits(federation),
                "honest_shares": federation_honest_shares(federation)}
    mechanism = KERNEL.mechanism(params, plan.noise_multiplier, ADJACENCY, dim=dim,
                                 noise=plan.noise, **grid)
    answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
    block = answer.value
    moments = None if moment_weight is None else block[:, 1 + dim:] / moment_weight
    return CellStatistics(block[:, 0] / count_weight, block[:, 1:1 + dim], moments, mechanism,
                          count_weight, answer.noise_std_factor)


def federation_grid_bits(federation: Federation) -> int:
    """The fixed-point grid 2^-f the federation's sites round onto, which
    integer noise must live on (both federations keep it in their codec)."""
    codec = getattr(federation, "codec", None)
    if codec is None:
        raise ValueError("discrete noise needs the federation's fixed-point grid, and this "
                         "federation has no codec")
    return int(codec.fractional_bits)


def federation_honest_shares(federation: Federation) -> int:
    """n = K - t: the shares that carry a distributed noise's sigma, t the
    federation's ``collusion_tolerance`` (0 where it exposes none: its sites
    then refuse a job with t > 0 rather than being under-charged)."""
    tolerance = int(getattr(federation, "collusion_tolerance", 0))
    if not 0 <= tolerance < federation.num_sites:
        raise ValueError(f"collusion tolerance {tolerance} leaves no honest share among "
                         f"{federation.num_sites} sites")
    return federation.num_sites - tolerance


def uniform_ball_points(count: int, dim: int, radius: float,
                        rng: np.random.Generator) -> np.ndarray:
    """``count`` points uniform in the ball of ``radius`` (public randomness),
    a hair inside it so the kernel's range check admits them."""
    directions = rng.normal(size=(count, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radii = radius * (1 - 1e-12) * rng.random(count) ** (1.0 / dim)
    return directions * radii[:, None]


def moved_centres(centres: np.ndarray, cells: CellStatistics, threshold: float,
                  clip_norm: float) -> np.ndarray:
    """Lloyd's update on the noisy statistics: noisy mean where the noisy count
    exceeds ``threshold``, projected onto the clip ball; else unchanged."""
    kept = cells.counts > threshold
    means = cells.sums[kept] / cells.counts[kept, None]
    out = centres.copy()
    out[kept] = clip_rows_to_norm(means, clip_norm)
    return out


@dataclass
class PrivateLloydResult:
    """``centres``: the kept centres (noisy count over ``threshold``), the
    private stand-in for the source; ``all_centres`` and ``counts`` every
    centre of the last round and its last noisy count; ``history`` the centres
    each round was asked at; ``mechanisms`` one per release, as planned."""

    centres: np.ndarray
    all_centres: np.ndarray
    counts: np.ndarray
    threshold: float
    history: list[np.ndarray]
    mechanisms: list[Mechanism]
    plan: PrivacyPlan
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def lloyd_rounds(federation: Federation, centres: np.ndarray, rounds: int, *,
                 clip_norm: float, weights: tuple[float, float | None], plan: PrivacyPlan,
                 min_count: float | None, history: list[np.ndarray],
                 mechanisms: list[Mechanism]) -> tuple[np.ndarray, CellStatistics, float]:
    """``rounds`` DP Lloyd rounds from ``centres``: the moved centres, the last
    release and the threshold it was read with (appending to ``history`` and
    ``mechanisms``)."""
    cells, threshold = None, 0.0
    for _ in range(rounds):
        history.append(centres)
        cells = noisy_cell_statistics(federation, centres, clip_norm=clip_norm,
                                      weights=weights, plan=plan)
        mechanisms.append(cells.mechanism)
        threshold = 2 * cells.count_noise_std if min_count is None else min_count
        centres = moved_centres(centres, cells, threshold, clip_norm)
    assert cells is not None
    return centres, cells, threshold


def private_lloyd(federation: Federation, *, n_clusters: int, iterations: int,
                  epsilon: float | None, rho: float | None, clip_norm: float,
                  count_share: float, min_count: float | None,
                  initial_centres: np.ndarray | None = None, seed: int | None,
                  noise: str) -> PrivateLloydResult:
    """DP Lloyd on the federation's records (module docstring): ``iterations``
    releases at ``epsilon`` / ``iterations`` (Laplace; with ``noise="discrete"``
    the exact discrete Laplace) or ``rho`` / ``iterations`` (Gaussian; with
    ``noise="discrete"`` the distributed discrete Gaussian) each; the values
    :class:`~.private_kmeans.PrivateLloydKMeans` checked at fit."""
    plan = PrivacyPlan.split(epsilon, rho, iterations, discrete=noise == "discrete")
    dim = federation.dim
    if initial_centres is None:
        centres = uniform_ball_points(n_clusters, dim, clip_norm, np.random.default_rng(seed))
    else:
        centres = np.array(initial_centres, dtype=float)
        if centres.shape != (n_clusters, dim):
            raise ValueError(f"initial_centres must have shape ({n_clusters}, {dim}), "
                             f"got {centres.shape}")
    weights = column_weights(plan.noise, dim, clip_norm, count_share)
    history: list[np.ndarray] = []
    mechanisms: list[Mechanism] = []
    centres, cells, threshold = lloyd_rounds(
        federation, centres, iterations, clip_norm=clip_norm, weights=weights, plan=plan,
        min_count=min_count, history=history, mechanisms=mechanisms)
    kept = cells.counts > threshold
    return PrivateLloydResult(centres[kept], centres, cells.counts, threshold, history,
                              mechanisms, plan, federation.privacy_spent())
