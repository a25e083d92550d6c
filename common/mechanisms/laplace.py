"""The Laplace mechanism: pure epsilon-DP noise on one L1-bounded block."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency, NoiseRequest, OneBlockMechanism, Shape
from privadapt.common.noise.floating import RandomBits, laplace_share
from privadapt.common.validation import (
    check_nonnegative_finite,
    check_positive_finite,
    frozen_value,
)

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


@frozen_value
class LaplaceMechanism(OneBlockMechanism):
    """Laplace noise of ``scale`` b on a one-block release of L1
    ``sensitivity``: pure epsilon = sensitivity / scale. Its dp-accounting
    event is ``LaplaceDpEvent(scale / sensitivity)``."""

    sensitivity: float
    scale: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "laplace"
    noise_norm: ClassVar[str] = "l1"

    def __post_init__(self) -> None:
        check_nonnegative_finite("LaplaceMechanism.sensitivity", self.sensitivity)
        check_positive_finite("LaplaceMechanism.scale", self.scale)
        self.adjacency = Adjacency(self.adjacency)

    @classmethod
    def for_kernel(cls, request: NoiseRequest) -> LaplaceMechanism:
        """scale = z ratio charged L1 sensitivity, i.e. z = 1/epsilon."""
        (charged,), (ratio,) = request.charged, request.ratios
        return cls(charged, request.noise_multiplier * ratio * charged, request.adjacency)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    @property
    def noise_scales(self) -> tuple[float, ...]:
        return (self.scale,)

    @property
    def noise_multiplier(self) -> float:
        return math.inf if self.sensitivity == 0 else self.scale / self.sensitivity

    @property
    def summary(self) -> str:
        return f"laplace eps={self.epsilon:.3g}"

    def _dp_event(self) -> DpEvent:
        from dp_accounting import dp_event

        return dp_event.LaplaceDpEvent(self.noise_multiplier)

    def noise_shares(
        self,
        shapes: Sequence[Shape],
        num_sites: int,
        collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> tuple[np.ndarray, ...]:
        return tuple(
            laplace_share(self.scale, num_sites, collusion_tolerance, shape, source)
            for shape in shapes
        )

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "scale": self.scale}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaplaceMechanism:
        return cls(float(data["sensitivity"]), float(data["scale"]), Adjacency(data["adjacency"]))
