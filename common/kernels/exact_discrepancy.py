"""The paper's exact empirical discrepancy, computed at the one site that holds
the whole private sample (seed 000, Section 4, "Discrepancy estimates", eq. (2)).

For the squared loss l(w; x, y) = (w.x - y)^2 = v^T z z^T v with z = [x, y] and
v = [w, -1], a mean loss is a quadratic form in the second moments
M = (1/N) sum z z^T, so the discrepancy estimate (2)

    d-hat = sup_{||w|| <= Lambda} | (1/m) sum_pub l(w; x_i, y_i) - (1/n) sum_priv l(w; x_i, y_i) |
          = sup_{||w|| <= Lambda} | v^T (M_pub - M_priv) v |

is the larger of two trust-region subproblems (both signs), solved exactly by
:func:`privadapt.common.trust_region.maximize_quadratic_on_ball`.

The kernel releases the *sum-scaled* statistic n d-hat = sup_w |v^T (n M_pub -
sum_priv z z^T) v|, so that, like every kernel, its sensitivity is a function of
the public parameters alone (the coordinator divides by the public n).

Sensitivity (derivation). The site clips every record to ||x|| <= r and
|y| <= Y, so for every w in the ball each record's loss lies in [0, B],
B = (Lambda r + Y)^2, since |w.x - y| <= Lambda r + Y. Write
f(w) = n p(w) - sum_priv l_i(w), with p(w) = v^T M_pub v the public mean loss,
so the release is sup_w |f(w)|, and sup_w |f| moves by at most sup_w |f' - f|.
* Replace one record (n fixed): f' - f = l_old(w) - l_new(w) in [-B, B], so
  the release moves by at most B, whatever the public moments and the data.
* Add or remove one record (n -> n +- 1): f' - f = +-(p(w) - l(w)), and with
  p(w) in [p_lo, p_hi] over the ball (computed exactly from the public moments)
  and l(w) in [0, B], |p - l| <= max(|p_lo|, |p_hi|, |p_lo - B|, |p_hi - B|);
  for honest public moments (clipped the same way) p is in [0, B] and this is B.
The release is one number, so its L1 and L2 sensitivities are equal.

The paper adds Laplace(B/n) to d-hat (the coordinator's ``single_holder``
estimate asks for Laplace(B / epsilon) on n d-hat); the site draws it through
its own Laplace mechanism path.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.kernels.base import Kernel, get_kernel, positive_param, register
from privadapt.common.kernels.reweighted_gradient import loss_bounds
from privadapt.common.mechanisms import Adjacency
from privadapt.common.trust_region import quadratic_range_on_ball


def squared_loss_range(moments: np.ndarray, radius: float) -> tuple[float, float]:
    """(min, max) over ||w|| <= radius of v^T M v with v = [w, -1], M of size
    (d+1) x (d+1) (symmetrised): the range of a mean squared loss, or of a
    difference of two, given second moments of z = [x, y]."""
    moments = np.asarray(moments, dtype=float)
    moments = 0.5 * (moments + moments.T)
    # v^T M v = w^T M_xx w - 2 M_xy^T w + M_yy
    return quadratic_range_on_ball(moments[:-1, :-1], -moments[:-1, -1], moments[-1, -1], radius)


def squared_loss_discrepancy(moment_difference: np.ndarray, radius: float) -> float:
    """sup over ||w|| <= radius of |v^T D v|, v = [w, -1]: the discrepancy of
    seed 000, eq. (2), for the squared loss, given D = M_pub - M_priv."""
    low, high = squared_loss_range(moment_difference, radius)
    return max(abs(low), abs(high))


@register
class ExactDiscrepancy(Kernel):
    """n d-hat: the sum-scaled exact discrepancy between the public moments and
    this site's clipped records.

    params: ``feature_norm`` r, ``label_bound`` Y, ``radius`` Lambda and
    ``public_moments`` (d+1) x (d+1), the public M_pub normalised by m.
    """

    name = "exact_discrepancy"

    def validate_params(self, params: Mapping[str, Any], dim: int) -> None:
        for key in ("feature_norm", "label_bound", "radius"):
            positive_param(params, key)
        moments = params.get("public_moments")
        if not isinstance(moments, np.ndarray) or moments.shape != (dim + 1, dim + 1):
            raise ValueError(
                f"parameter 'public_moments' must be an array of shape ({dim + 1}, {dim + 1}), "
                f"got {getattr(moments, 'shape', type(moments).__name__)}"
            )
        if not np.all(np.isfinite(moments)):
            raise ValueError("parameter 'public_moments' must be finite")

    def output_shapes(self, params: Mapping[str, Any], dim: int) -> tuple[tuple[int, ...], ...]:
        return ((1,),)

    def loss_bound(self, params: Mapping[str, Any]) -> float:
        """B = (Lambda r + Y)^2, the largest squared loss of a clipped record."""
        return loss_bounds("squared", positive_param(params, "feature_norm"),
                           positive_param(params, "label_bound"),
                           positive_param(params, "radius"))[0]

    def _public_range(self, params: Mapping[str, Any]) -> tuple[float, float]:
        return squared_loss_range(params["public_moments"], positive_param(params, "radius"))

    def l2_sensitivities(self, params: Mapping[str, Any], adjacency: Adjacency) -> tuple[float]:
        bound = self.loss_bound(params)
        if adjacency == Adjacency.REPLACE_ONE:
            return (bound,)
        low, high = self._public_range(params)
        return (max(abs(low), abs(high), abs(low - bound), abs(high - bound)),)

    def clip_bounds(self, params: Mapping[str, Any]) -> dict[str, float]:
        return get_kernel("second_moments").clip_bounds(params)

    def max_abs_sum(self, params: Mapping[str, Any], num_records: int) -> float:
        # |n p(w) - sum l_i(w)| <= n max|p| + n B
        low, high = self._public_range(params)
        return num_records * (max(abs(low), abs(high)) + self.loss_bound(params))

    def compute(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        # The same clipping as the Gaussian route's kernel: one code path.
        (private_sum,) = get_kernel("second_moments").compute(data, params, state)
        difference = data.num_records * params["public_moments"] - private_sum
        value = squared_loss_discrepancy(difference, positive_param(params, "radius"))
        return (np.array([value]),)
