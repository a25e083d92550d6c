"""The number of records at a site.

Under replace-one adjacency a site's size is public (DESIGN.md section 2) and
the count has sensitivity 0; under add/remove one record changes it by 1.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import Kernel, NoParams, register
from privadapt.common.mechanisms import Adjacency


@register
class RecordCount(Kernel):
    """The count n_k as a one-element block. No parameters (:class:`NoParams`)."""

    name = "record_count"
    Params = NoParams

    def output_shapes(self, params: NoParams, dim: int) -> tuple[tuple[int, ...], ...]:
        return ((1,),)

    def l2_sensitivities(self, params: NoParams, adjacency: Adjacency) -> tuple[float]:
        return (0.0 if adjacency == Adjacency.REPLACE_ONE else 1.0,)

    def computation_errors(self, params: NoParams, dim: int, max_records: int) -> tuple[float]:
        return (0.0,)  # n < 2^53 is an exact float64: nothing to charge

    def max_abs_sum(self, params: NoParams, num_records: int) -> float:
        return float(num_records)

    def compute(
        self, data: Dataset, params: NoParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        return (np.array([float(data.num_records)]),)
