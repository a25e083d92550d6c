"""Site-side kernels: the only code that reads private records.

Importing this package registers every kernel; sites look them up by name.
Each kernel has a typed ``Params`` (``from_wire`` / ``to_wire``) and builds
the mechanism an algorithm should ask for (``Kernel.mechanism``).
"""

from privadapt.common.kernels import (
    exact_discrepancy,
    l1_vertex_scores,
    linear_gradient,
    linf_gradient,
    loss_difference_histogram,
    nearest_source_averages,
    nearest_target_sums,
    record_count,
    regularized_erm,
    reweighted_gradient,
    second_moments,
    smoothed_discrepancy_gradient,
    validation_loss,
)
from privadapt.common.kernels.base import (
    Kernel,
    KernelParams,
    NoParams,
    get_kernel,
    register,
    registered_kernels,
)

__all__ = [
    "Kernel",
    "KernelParams",
    "NoParams",
    "exact_discrepancy",
    "get_kernel",
    "l1_vertex_scores",
    "linear_gradient",
    "linf_gradient",
    "loss_difference_histogram",
    "nearest_source_averages",
    "nearest_target_sums",
    "record_count",
    "register",
    "registered_kernels",
    "regularized_erm",
    "reweighted_gradient",
    "second_moments",
    "smoothed_discrepancy_gradient",
    "validation_loss",
]
