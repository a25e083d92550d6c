"""Which planned releases the federation's fixed-point grid cannot carry.

A site rounds its noise share onto the aggregation grid 2^-f and refuses a
release whose noise is too coarse for it (client/query_admission.py: a
standard deviation or Laplace scale above
:func:`~privadapt.common.noise.floating.max_grid_safe_noise`, where the
doubles a sample can take are spaced wider than the grid). That refusal
comes at the round, after every earlier release of the job was charged. The
same comparison on the planned releases (server/federation/planning.py)
finds such a release before anything is spent: the job can then be
re-planned (an estimator that can drop the candidates whose release is too
coarse) or refused at launch, naming the release.

Only released blocks are rounded onto the grid (local blocks stay floats at
the site) and a selection releases an index, not a noisy value: neither is
compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from privadapt.common.kernels import get_kernel
from privadapt.common.noise.floating import max_grid_safe_noise
from privadapt.server.federation.planning import PlannedRelease


@dataclass(frozen=True)
class GridExcess:
    """Planned release ``index`` (0-based, in the order the job makes them)
    would add noise of ``scale`` where the grid carries at most ``limit``."""

    index: int
    release: PlannedRelease
    scale: float
    limit: float
    fractional_bits: int

    def describe(self) -> str:
        return (f"release {self.index + 1} ({self.release.kernel}, "
                f"{self.release.form.value}) would add noise of scale {self.scale:.4g}, "
                f"above {self.limit:.4g}, the largest the fixed-point grid 2^-"
                f"{self.fractional_bits} carries")


def released_noise_scale(release: PlannedRelease, dim: int) -> float:
    """The largest noise scale among the release's released blocks (0 for a
    selection, which releases an index, and for a release without noise)."""
    mechanism = release.mechanism
    if getattr(mechanism, "releases_index", False) or mechanism.is_non_private:
        return 0.0
    kernel = get_kernel(release.kernel)
    released = len(kernel.output_shapes(kernel.Params.from_wire(release.params, dim), dim))
    return max(mechanism.noise_scales[:released], default=0.0)


def releases_over_grid(releases: Sequence[PlannedRelease], fractional_bits: int,
                       dim: int) -> list[GridExcess]:
    """Every release whose released noise the grid 2^-``fractional_bits``
    cannot carry (module docstring), in plan order."""
    limit = max_grid_safe_noise(fractional_bits)
    excess = []
    for index, release in enumerate(releases):
        scale = released_noise_scale(release, dim)
        if scale > limit:
            excess.append(GridExcess(index, release, scale, limit, fractional_bits))
    return excess
