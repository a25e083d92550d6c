"""A release without noise: free at zero sensitivity, otherwise not private."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import (
    Adjacency,
    KernelMechanism,
    Shape,
)
from privadapt.common.noise.floating import RandomBits
from privadapt.common.validation import check_nonnegative_finite, frozen_value


@frozen_value
class NoNoise(KernelMechanism):
    """Release without noise. Private (epsilon 0) only when every declared
    sensitivity is 0 (e.g. a site's record count under replace-one adjacency,
    where site sizes are public); otherwise it is a non-private release that only
    a site whose policy allows it (test and simulation mode) will answer. Its
    dp-accounting event is ``NoOpDpEvent`` when free, else ``NonPrivateDpEvent``."""

    sensitivities: tuple[float, ...] = (0.0,)  # type: ignore[assignment]
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "no_noise"

    def __post_init__(self) -> None:
        self.sensitivities = tuple(float(s) for s in self.sensitivities)
        for s in self.sensitivities:
            check_nonnegative_finite("NoNoise.sensitivities", s)
        self.adjacency = Adjacency(self.adjacency)

    @property
    def is_free(self) -> bool:
        return all(s == 0 for s in self.sensitivities)

    @property
    def is_non_private(self) -> bool:
        return not self.is_free

    @property
    def noise_scales(self) -> tuple[float, ...]:
        return (0.0,) * len(self.sensitivities)

    @property
    def noise_multiplier(self) -> float:
        return math.inf if self.is_free else 0.0

    @property
    def summary(self) -> str:
        return "no noise (free)" if self.is_free else "no noise (NOT PRIVATE)"

    def with_sensitivities(self, sensitivities: Sequence[float], adjacency: Adjacency) -> NoNoise:
        return NoNoise(tuple(sensitivities), adjacency)

    def noise_shares(
        self,
        shapes: Sequence[Shape],
        num_sites: int,
        collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> tuple[np.ndarray, ...]:
        return tuple(np.zeros(shape, dtype=np.float64) for shape in shapes)

    def local_noise(
        self, shapes: Sequence[Shape], source: RandomBits | None = None
    ) -> tuple[np.ndarray, ...]:
        return tuple(np.zeros(shape, dtype=np.float64) for shape in shapes)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivities": list(self.sensitivities)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoNoise:
        return cls(tuple(float(s) for s in data["sensitivities"]), Adjacency(data["adjacency"]))
