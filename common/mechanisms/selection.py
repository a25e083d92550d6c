"""TEMPORARY stub of the selection mechanisms (replaced by work-select at merge)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency, Mechanism
from privadapt.common.noise import RandomBits, laplace_noise


class SelectionMechanism(Mechanism):
    releases_index: ClassVar[bool] = True
    minimize: bool

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        raise NotImplementedError

    def with_score_sensitivities(self, sensitivities: Sequence[float],
                                 adjacency: Adjacency) -> SelectionMechanism:
        raise NotImplementedError

    def select(self, scores: np.ndarray, source: RandomBits | None = None) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class ReportNoisyMin(SelectionMechanism):
    sensitivity: float
    scale: float
    minimize: bool = True
    monotone: bool = False
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "report_noisy_laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

    @property
    def is_free(self) -> bool:
        return self.sensitivity == 0

    @property
    def pure_epsilon(self) -> float:
        return (1 if self.monotone else 2) * self.sensitivity / self.scale

    @property
    def summary(self) -> str:
        return f"report-noisy-min eps={self.pure_epsilon:.3g}"

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        return (self.sensitivity,)

    def with_score_sensitivities(self, sensitivities, adjacency):
        return ReportNoisyMin(max(sensitivities), self.scale, self.minimize, self.monotone,
                              adjacency)

    def _as_replace_one(self):
        return self.with_score_sensitivities((2 * self.sensitivity,), Adjacency.REPLACE_ONE)

    def select(self, scores, source=None) -> int:
        noisy = np.asarray(scores, float) + laplace_noise(self.scale, scores.shape, source)
        return int(np.argmin(noisy) if self.minimize else np.argmax(noisy))

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "scale": self.scale,
                "minimize": self.minimize, "monotone": self.monotone}

    @classmethod
    def from_dict(cls, data):
        return cls(float(data["sensitivity"]), float(data["scale"]), bool(data["minimize"]),
                   bool(data["monotone"]), Adjacency(data["adjacency"]))


_ = math
