"""Differentially private projected noisy minibatch SGD on the private target.

The "noisy minibatch SGD" target-only baseline of seed 000 (Section 6, Figure 2;
Bassily, Feldman, Talwar and Thakurta 2019, "Private stochastic convex
optimization with optimal rates", Alg. 1), with Poisson minibatches: for
t = 1..T, every site includes each of its records independently with
probability q = b / n (b the expected batch size), secretly, and

    g_t = (1 / (q n)) (sum_{i in B_t} clip_C(grad l(w_t; x_i, y_i)) + N(0, sigma^2 I))
    w_{t+1} = Proj_{||w|| <= Lambda}(w_t - eta g_t)

The minibatch sum is one ``linear_gradient`` query per step with a
Poisson-sampled Gaussian mechanism (``GaussianMechanism.sampling_rate`` = q);
dividing by the expected batch size q n keeps g_t unbiased for the clipped
full gradient. Deviation from Bassily et al. 2019, who draw batches of fixed
size m: Poisson batches are drawn by each site alone (no coordination of a
fixed-size sample across sites) and their amplification is accounted tightly
by dp-accounting's ``PoissonSampledDpEvent`` PLD.

Adjacency: add/remove one record (the relation Poisson amplification is
stated in; sites must hold an ``add_remove_one`` policy, or they refuse). The
L2 sensitivity of the sampled sum is then C, and sigma = z C with z calibrated
by the accountant so that everything the job releases meets (epsilon, delta)
exactly.

n under add/remove is private (DESIGN.md section 2), and q = b / n needs it.
By default the job spends ``count_budget_fraction`` of epsilon on one noisy
``record_count`` (Gaussian, sensitivity 1) and calibrates the T steps for the
rest, so the whole job, count included, is (epsilon, delta). A caller who knows
a public n (a published cohort size) passes ``num_records`` and spends nothing
on it. Either way privacy never depends on n being right: n only sets q and the
step's scale, both public choices the sites account as declared.

``epsilon = inf`` runs the non-private version, full batch (q = 1: ``NoNoise``
carries no sampling), which is noisy_gd's non-private path; only simulation
sites (policy ``allow_non_private``) answer it.

Written against the ``Federation`` protocol only: it runs unchanged in-process
and across the network.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.base import NoParams
from privadapt.common.kernels.linear_gradient import LinearGradient, LinearGradientParams
from privadapt.common.kernels.record_count import RecordCount
from privadapt.common.losses import BinaryLoss
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.server.algorithms.gradient_descent.noisy_gd import (
    IterationRecord,
    projected_gradient_descent,
)

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
_COUNT = RecordCount()
_GRADIENT = LinearGradient()


@dataclass
class NoisySGDResult:
    """The fitted model, its history and what it cost each site.

    ``num_records`` is the n the steps were scaled with (the noisy count, or
    the caller's); ``sampling_rate`` is q = expected batch / n, capped at 1.
    """

    weights: np.ndarray
    average_weights: np.ndarray
    noise_multiplier: float
    sampling_rate: float
    num_records: float
    history: list[IterationRecord] = field(default_factory=list)
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def noisy_sgd(
    federation: Federation,
    *,
    dim: int,
    loss: BinaryLoss,
    epsilon: float,
    delta: float,
    iterations: int,
    expected_batch_size: float,
    learning_rate: float,
    radius: float,
    clip_norm: float,
    num_records: float | None,
    count_budget_fraction: float,
    initial_weights: np.ndarray | None = None,
    progress: Callable[[IterationRecord], None] | None = None,
    progress_every: int = 10,
    checkpoint: Callable[[int, np.ndarray], None] | None = None,
) -> NoisySGDResult:
    """Fit a linear model on the federation's private records by projected
    noisy minibatch SGD with Poisson batches of expected size
    ``expected_batch_size``; see the module docstring. ``checkpoint`` is called
    with (iteration, weights) after every step. The hyperparameters come
    checked (:class:`~.estimators.NoisySGD` validates them at fit, before the
    count spends anything); nothing here checks their ranges again."""
    # The step's sensitivity depends on the clip norm alone, not on the weights.
    step_params = LinearGradientParams(np.zeros(dim), loss, clip_norm)
    private = not math.isinf(epsilon)
    spent: tuple[Mechanism, ...] = ()
    if num_records is None:
        count_mechanism = _count_mechanism(epsilon, delta, count_budget_fraction, dim)
        num_records = _noisy_record_count(federation, count_mechanism)
        spent = (count_mechanism,)
    sampling_rate = min(1.0, expected_batch_size / num_records) if private else 1.0
    mechanism = _step_mechanism(epsilon, delta, iterations, step_params, sampling_rate, spent)
    batch_scale = sampling_rate * num_records
    weights, average_weights, _, history = projected_gradient_descent(
        federation, mechanism, dim=dim, loss=loss, clip_norm=clip_norm,
        gradient_scale=batch_scale, iterations=iterations, learning_rate=learning_rate,
        radius=radius, initial_weights=initial_weights, progress=progress,
        progress_every=progress_every, checkpoint=checkpoint)
    return NoisySGDResult(
        weights=weights,
        average_weights=average_weights,
        noise_multiplier=math.inf if mechanism.is_non_private else mechanism.noise_multiplier,
        sampling_rate=sampling_rate,
        num_records=float(num_records),
        history=history,
        privacy=federation.privacy_spent(delta if private else None),
    )


def _count_mechanism(
    epsilon: float, delta: float, count_budget_fraction: float, dim: int
) -> Mechanism:
    """The release of n (sensitivity 1 under add/remove): a Gaussian count
    costing ``count_budget_fraction`` of epsilon on its own, or the exact count
    when the run is not private."""
    # inf stays inf whatever the fraction (unchecked when the run is not private).
    target = math.inf if math.isinf(epsilon) else count_budget_fraction * epsilon
    multiplier = noise_multiplier(target, delta, ReleasePlan(1, adjacency=ADD_REMOVE))
    return _COUNT.mechanism(NoParams(), multiplier, ADD_REMOVE, dim=dim)


def _noisy_record_count(federation: Federation, mechanism: Mechanism) -> float:
    """n from one ``record_count`` query, at least 1 so that q = b / n is defined
    (a count that noise pushed below 1 gives q = 1: full batches)."""
    count = float(federation.query(_COUNT.name, NoParams().to_wire(), mechanism).value[0])
    return max(1.0, count)


def _step_mechanism(
    epsilon: float,
    delta: float,
    iterations: int,
    params: LinearGradientParams,
    sampling_rate: float,
    already_spent: tuple[Mechanism, ...],
) -> Mechanism:
    """Each step's release: a Gaussian of sensitivity C (plus rounding) on a
    Poisson sample at ``sampling_rate``, its multiplier calibrated so that
    ``already_spent`` and ``iterations`` steps compose to exactly (epsilon,
    delta); no noise at all when ``epsilon`` is infinite."""
    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(
        iterations, adjacency=ADD_REMOVE, sampling_rate=sampling_rate,
        already_spent=already_spent))
    return _GRADIENT.mechanism(params, multiplier, ADD_REMOVE, dim=len(params.weights),
                               sampling_rate=sampling_rate)
