"""The Laplace mechanism: pure epsilon-DP noise on one L1-bounded block."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import (
    Adjacency,
    KernelMechanism,
    Shape,
)
from privadapt.common.noise.floating import RandomBits, laplace_share
from privadapt.common.validation import check_nonnegative_finite, check_positive_finite


@dataclass(frozen=True)
class LaplaceMechanism(KernelMechanism):
    """Laplace noise of ``scale`` b on a one-block release of L1
    ``sensitivity``: pure epsilon = sensitivity / scale."""

    sensitivity: float
    scale: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "laplace"
    noise_norm: ClassVar[str] = "l1"
    supports_local_blocks: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_nonnegative_finite("LaplaceMechanism.sensitivity", self.sensitivity)
        check_positive_finite("LaplaceMechanism.scale", self.scale)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    @property
    def sensitivities(self) -> tuple[float, ...]:
        return (self.sensitivity,)

    @property
    def noise_scales(self) -> tuple[float, ...]:
        return (self.scale,)

    @property
    def noise_multiplier(self) -> float:
        return math.inf if self.sensitivity == 0 else self.scale / self.sensitivity

    @property
    def summary(self) -> str:
        return f"laplace eps={self.epsilon:.3g}"

    def with_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency
    ) -> LaplaceMechanism:
        (sensitivity,) = sensitivities
        return LaplaceMechanism(sensitivity, self.scale, adjacency)

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

    def local_noise(
        self, shapes: Sequence[Shape], source: RandomBits | None = None
    ) -> tuple[np.ndarray, ...]:
        if shapes:
            raise ValueError("a Laplace mechanism has no local blocks: a kernel with local "
                             "blocks takes Gaussian noise only")
        return ()

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "scale": self.scale}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaplaceMechanism:
        return cls(float(data["sensitivity"]), float(data["scale"]), Adjacency(data["adjacency"]))
