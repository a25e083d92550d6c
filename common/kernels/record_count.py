"""The number of records at a site.

Under replace-one adjacency a site's size is public (DESIGN.md section 2) and
the count has sensitivity 0; under add/remove one record changes it by 1.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.kernels.base import Kernel, register
from privadapt.common.mechanisms import Adjacency


@register
class RecordCount(Kernel):
    """The count n_k as a one-element block. No parameters."""

    name = "record_count"

    def validate_params(self, params: Mapping[str, Any], dim: int) -> None:
        if params:
            raise ValueError(f"record_count takes no parameters, got {sorted(params)}")

    def output_shapes(self, params: Mapping[str, Any], dim: int) -> tuple[tuple[int, ...], ...]:
        return ((1,),)

    def l2_sensitivities(self, params: Mapping[str, Any], adjacency: Adjacency) -> tuple[float]:
        return (0.0 if adjacency == Adjacency.REPLACE_ONE else 1.0,)

    def max_abs_sum(self, params: Mapping[str, Any], num_records: int) -> float:
        return float(num_records)

    def compute(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        return (np.array([float(data.num_records)]),)
