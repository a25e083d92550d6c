"""The Frank-Wolfe vertex scores over the l1 ball: what a single data holder
selects on in the private Frank-Wolfe algorithm (seed 002,
../shared/seeds/002_1280d45208a19d26.txt, Algorithm 2 line 3; Talwar, Thakurta
and Zhang 2015, Algorithm 2).

The l1 ball of radius h around a public centre c is conv(S) with the 2d
vertices S = {c +- h e_j}. At the point theta = c + offset (public: the
coordinator sends c, the offset and h) each vertex s is scored by the linear
objective Frank-Wolfe minimises, <s - c, grad L(theta)>; with
g = sum_i clip_inf,C(grad l(theta; x_i, y_i)) (:mod:`.linf_gradient`) that is,
in sum units, one block of shape (2d,):

    scores[j]     = <+h e_j, g> =  (h g)_j      j = 0..d-1,
    scores[d + j] = <-h e_j, g> = -(h g)_j.

The site computes h g as the exact sum of the per-record terms
clip_inf,hC(h grad l_i), i.e. h times the C-clipped gradients (the same terms,
clipped at hC after scaling by h, so the bound holds to the bit), and negates
it for the second half (exact).

Sensitivity (derivation), per score. Every per-record term of h g has
entries in [-hC, hC].
* Add or remove one record: every score moves by that record's entry, at most
  hC; normalised by n (the paper's mean loss) that is hC / n.
* Replace one record: every score moves by the difference of two entries in
  [-hC, hC], at most 2hC (2hC / n normalised): the paper's
  L_1 ||C||_1 / n with L_1 = C and ||C||_1 = h, twice for a replacement.
The release as a vector moves by at most sqrt(2d) times that in L2. Scores move
in both directions at once (a record raises +h e_j's score exactly when it
lowers -h e_j's), so they are not monotone. A selection on these scores
(report-noisy-min, :class:`~privadapt.common.mechanisms.ReportNoisyMin`) costs
2 Delta / b per step with Delta the per-score sensitivity above.

Range checks, although privacy does not rest on them (the clipping does): the
offset must lie in the ball, ||offset||_1 <= h (up to a relative 1e-12 for the
rounding of a convex combination), the centre and offset are finite, and h and
C are within :data:`~privadapt.common.kernels.base.BOUND_RANGE`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.linf_gradient import (
    exact_clipped_gradient_sum,
    exact_gradient_work,
)
from privadapt.common.losses import BINARY_LOSSES, BinaryLoss
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import (
    check_array_shape,
    check_finite_array,
    check_one_of,
    frozen_value,
)

#: The rounding a coordinator's convex combination may leave on ||offset||_1.
BALL_SLACK = 1e-12


@frozen_value(eq=False)
class L1VertexScoresParams(KernelParams):
    """``offset`` theta - c (d,) with ||offset||_1 <= h, ``radius`` h,
    ``clip_norm`` C (infinity norm of a per-record gradient), ``loss``, and
    ``center`` c (d,) or None for the origin."""

    offset: np.ndarray
    radius: float
    clip_norm: float
    loss: BinaryLoss = "squared"
    center: np.ndarray | None = None

    def __post_init__(self) -> None:
        offset = check_finite_array("parameter 'offset'", self.offset, (None,))
        self.offset = readonly(offset)
        radius = check_bound("parameter 'radius'", self.radius)
        self.radius = radius
        self.clip_norm = check_bound("parameter 'clip_norm'", self.clip_norm)
        check_one_of("parameter 'loss'", self.loss, BINARY_LOSSES)
        norm = math.fsum(np.abs(offset))
        if norm > radius * (1.0 + BALL_SLACK):
            raise ValueError(f"parameter 'offset' must lie in the l1 ball of radius "
                             f"{radius:g}, got ||offset||_1 = {norm:g}")
        if self.center is not None:
            center = check_finite_array("parameter 'center'", self.center, offset.shape)
            self.center = readonly(center)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> L1VertexScoresParams:
        values = wire_values(params, ("offset", "radius", "clip_norm", "loss"))
        # Copied and checked finite once, by the constructor.
        offset = check_array_shape("parameter 'offset'", values["offset"], (dim,))
        return cls(offset, values["radius"], values["clip_norm"], values["loss"],
                   params.get("center"))

    def to_wire(self) -> dict[str, Any]:
        wire = {"offset": self.offset, "radius": self.radius, "clip_norm": self.clip_norm,
                "loss": self.loss}
        if self.center is not None:
            wire["center"] = self.center
        return wire

    @property
    def dim(self) -> int:
        return int(self.offset.shape[0])

    @property
    def point(self) -> np.ndarray:
        """theta = c + offset, where the gradient is taken."""
        return self.offset if self.center is None else self.center + self.offset

    @property
    def term_bound(self) -> float:
        """hC: the largest entry of one record's term of h g."""
        return self.radius * self.clip_norm


def vertex(index: int, dim: int, radius: float) -> np.ndarray:
    """The vertex (offset from the centre) a score index names: +h e_j for
    j < d, -h e_(j-d) otherwise."""
    point = np.zeros(dim)
    point[index % dim] = radius if index < dim else -radius
    return point


def scores_from_gradient(gradient_sum: np.ndarray, radius: float) -> np.ndarray:
    """(<+h e_j, g>)_j then (<-h e_j, g>)_j: the 2d scores of a gradient sum g
    (the coordinator's post-processing of a noisy g, and the non-private oracle)."""
    scaled = radius * np.asarray(gradient_sum, dtype=float)
    return np.concatenate([scaled, -scaled])


@register
class L1VertexScores(Kernel):
    """(<s, sum_i clip_inf,C(grad l(theta; x_i, y_i))>)_s over the 2d vertices
    s = +-h e_j of the l1 ball: one block of shape (2d,)."""

    name = "l1_vertex_scores"
    Params = L1VertexScoresParams

    def work(self, params: L1VertexScoresParams, dim: int, num_records: int) -> float:
        # The exact clipped gradient sum; its 2d scores are a vector's worth more.
        return exact_gradient_work(dim, num_records) + 2.0 * max(dim, 1)

    def output_shapes(self, params: L1VertexScoresParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((2 * dim,),)

    def _per_score(self, params: L1VertexScoresParams, adjacency: Adjacency) -> float:
        # Module docstring: hC per record, 2hC for a replacement.
        factor = 2.0 if adjacency == Adjacency.REPLACE_ONE else 1.0
        return factor * params.term_bound

    def l2_sensitivities(
        self, params: L1VertexScoresParams, adjacency: Adjacency
    ) -> tuple[float]:
        return (math.sqrt(2 * params.dim) * self._per_score(params, adjacency),)

    def score_sensitivities(
        self, params: L1VertexScoresParams, adjacency: Adjacency, dim: int
    ) -> tuple[float, ...]:
        return (self._per_score(params, adjacency),) * (2 * dim)

    def clip_bounds(self, params: L1VertexScoresParams) -> dict[str, float]:
        # The policy's clip_norm bounds a per-record gradient's L2 norm: sqrt(d) C here.
        return {"clip_norm": math.sqrt(params.dim) * params.clip_norm}

    def max_abs_sum(self, params: L1VertexScoresParams, num_records: int) -> float:
        return num_records * params.term_bound

    def compute(
        self, data: Dataset, params: L1VertexScoresParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        scaled = exact_clipped_gradient_sum(data, params.point, params.loss, params.radius,
                                            params.term_bound)
        return (np.concatenate([scaled, -scaled]),)
