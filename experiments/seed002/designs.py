"""The two simulated designs of the seed 002 experiment: a target and K public
auxiliary ("migrated") sources, each design with its own hyperparameters.

``sparse`` (d = 200, 10 non-zero coefficients, where the l1 geometry
matters): features uniform on [-1, 1]^200, beta with 10 entries 0.5
(||beta||_1 = 5), labels x.beta + N(0, 0.5^2); a private target of 2,000
records; k informative sources of 1,000 records with w_k = beta + delta_k,
delta_k 10 entries +-0.02 (||delta_k||_1 = 0.2), plus 5 distractors with
w = beta + 0.5 on every entry (||delta||_2 = 7.1). Its random stream is the
one the committed partial logs were made with: do not reorder the draws.

``low`` (the slides' own simulation, "Transfer Learning" and "step2: transfer
learning"). The OCR is thin; this is my reading of it. The slides fit
y = w^T x + b by gradient descent with Laplace noise on a target dataset
A_1 and "migrate" k = 0, 5, ..., 20 further datasets A_2, ..., A_n into the
fit, each dataset "satisfying a uniform distribution" A_k ~ U(a_k, b_k) -- a
uniform design on its own interval, so the migrated sources are
covariate-shifted copies of the target; their example has two features
(x = (i, i)) and y = 2i + 1, i.e. w = (1, 1), b = 1, and the SSE falls from
34 (0 migrated) to 0.5 (20 migrated). Here: a constant feature 1 (b is a
coefficient, so the l1 ball holds it too) and 2 features, beta = (1, 1, 1)
for (b, w_1, w_2); the private target's features uniform on [0, 1]^2
(a_1 = 0, b_1 = 1), 500 records; source k's features uniform on
[a_k, a_k + 1]^2 with a_k ~ U(-1, 0.5) drawn per source, 100 records; an
informative source has w_k = beta + delta_k with every entry of delta_k
+-0.02 (||delta_k||_1 = 0.06, ||delta_k||_2 = 0.035), and 2 distractors have
w = beta + 1 on every entry (||delta||_2 = 1.7); labels x.w + N(0, 0.5^2)
everywhere. Unlike the slides (whose migrated data are simply pooled with the
target), the sources are public and the target private: the informative set
is chosen against a DP pilot, and only the offset from w_A is fitted on the
private target (server/algorithms/frank_wolfe/transfer.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

Sample = tuple[np.ndarray, np.ndarray]
Problem = tuple[np.ndarray, Sample, list[Sample]]  # beta, target, sources (informative first)


@dataclass(frozen=True)
class Design:
    """One design: its data (``problem(run, k)``) and its methods' settings.

    ``transfer``: DPFrankWolfeTransfer's hyperparameters; ``reference_radius``
    the target-only DP Frank-Wolfe's l1 radius; ``gd`` NoisyGD's;
    ``iterations`` / ``quick_iterations``: main and pilot Frank-Wolfe steps
    (the target-only run takes both) and GD steps. ``stem``: the files'
    name (the sparse design keeps the original ``transfer*`` names, so its
    resumable log carries on)."""

    name: str
    stem: str
    dim: int
    distractors: int
    problem: Callable[[int, int], Problem]
    transfer: dict = field(default_factory=dict)
    reference_radius: float = 1.0
    gd: dict = field(default_factory=dict)
    iterations: dict = field(default_factory=dict)
    quick_iterations: dict = field(default_factory=dict)


NOISE = 0.5

# The sparse design (module docstring).
DIM, NONZERO, TARGET_N, SOURCE_N, DISTRACTORS = 200, 10, 2000, 1000, 5
CONTRAST, CONTRAST_ENTRIES = 0.02, 10
CONTRAST_L1 = CONTRAST * CONTRAST_ENTRIES  # ||delta_k||_1 of every informative source


def _sample(n: int, weights: np.ndarray, rng: np.random.Generator) -> Sample:
    features = rng.uniform(-1, 1, size=(n, len(weights)))
    return features, features @ weights + NOISE * rng.normal(size=n)


def sparse_problem(run: int, num_auxiliary: int) -> Problem:
    """beta, the target sample, and the sources (informative first)."""
    rng = np.random.default_rng(run)
    beta = np.zeros(DIM)
    beta[rng.choice(DIM, NONZERO, replace=False)] = 0.5
    target = _sample(TARGET_N, beta, rng)
    sources = []
    for _ in range(num_auxiliary):
        contrast = np.zeros(DIM)
        contrast[rng.choice(DIM, CONTRAST_ENTRIES, replace=False)] = rng.choice(
            [-CONTRAST, CONTRAST], CONTRAST_ENTRIES)
        sources.append(_sample(SOURCE_N, beta + contrast, rng))
    sources += [_sample(SOURCE_N, beta + 0.5, rng) for _ in range(DISTRACTORS)]
    return beta, target, sources


SPARSE = Design(
    name="sparse", stem="transfer", dim=DIM, distractors=DISTRACTORS, problem=sparse_problem,
    transfer={"radius": CONTRAST_L1, "pilot_radius": 6.0, "informative_threshold": 3.0,
              "norm": "l2", "clip_norm": 2.0, "pilot_fraction": 0.3},
    reference_radius=6.0,
    gd={"loss": "squared", "learning_rate": 1.0, "radius": 2.0, "clip_norm": 5.0},
    iterations={"main": 100, "pilot": 50, "gd": 50},
    quick_iterations={"main": 30, "pilot": 15, "gd": 20})

# The low-dimensional uniform design (module docstring).
LOW_BETA = np.array([1.0, 1.0, 1.0])  # (b, w_1, w_2): the slides' y = 2i + 1 at x = (i, i)
LOW_TARGET_N, LOW_SOURCE_N, LOW_DISTRACTORS = 500, 20, 2
LOW_CONTRAST = 0.02  # on every entry
LOW_CONTRAST_L1 = LOW_CONTRAST * len(LOW_BETA)
LOW_SEED = 2  # the low design's streams: default_rng((LOW_SEED, run))


def _uniform_design(n: int, low: float, weights: np.ndarray,
                    rng: np.random.Generator) -> Sample:
    """A constant feature and features uniform on [low, low + 1]^(d - 1)."""
    features = np.ones((n, len(weights)))
    features[:, 1:] = rng.uniform(low, low + 1.0, size=(n, len(weights) - 1))
    return features, features @ weights + NOISE * rng.normal(size=n)


def low_problem(run: int, num_auxiliary: int) -> Problem:
    """beta, the target on [0, 1]^2, the sources on shifted unit squares
    (informative first, then the distractors)."""
    rng = np.random.default_rng((LOW_SEED, run))
    beta = LOW_BETA.copy()
    target = _uniform_design(LOW_TARGET_N, 0.0, beta, rng)
    sources = []
    for _ in range(num_auxiliary):
        contrast = rng.choice([-LOW_CONTRAST, LOW_CONTRAST], len(beta))
        sources.append(_uniform_design(LOW_SOURCE_N, rng.uniform(-1.0, 0.5),
                                       beta + contrast, rng))
    sources += [_uniform_design(LOW_SOURCE_N, rng.uniform(-1.0, 0.5), beta + 2.0, rng)
                for _ in range(LOW_DISTRACTORS)]
    return beta, target, sources


LOW = Design(
    name="low", stem="transfer_low", dim=len(LOW_BETA), distractors=LOW_DISTRACTORS,
    problem=low_problem,
    transfer={"radius": LOW_CONTRAST_L1, "pilot_radius": 4.0, "informative_threshold": 1.5,
              "norm": "l2", "clip_norm": 2.0, "pilot_fraction": 0.3},
    reference_radius=4.0,
    gd={"loss": "squared", "learning_rate": 0.5, "radius": 2.5, "clip_norm": 3.0},
    iterations={"main": 60, "pilot": 30, "gd": 50},
    quick_iterations={"main": 30, "pilot": 15, "gd": 20})

DESIGNS = {design.name: design for design in (LOW, SPARSE)}
