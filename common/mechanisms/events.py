"""Accounting-only events: a privacy cost stated directly, with no kernel
sum released through them (dp-accounting's ``EpsilonDeltaDpEvent`` and a
zCDP event)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from privadapt.common.mechanisms.base import Adjacency, Mechanism
from privadapt.common.validation import check_nonnegative_finite


@dataclass(frozen=True)
class PureDpEvent(Mechanism):
    """A mechanism accounted as pure epsilon-DP (e.g. an exponential mechanism
    run entirely at one site)."""

    epsilon: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "pure_dp"

    def __post_init__(self) -> None:
        check_nonnegative_finite("PureDpEvent.epsilon", self.epsilon)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

    @property
    def is_free(self) -> bool:
        return self.epsilon == 0

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    @property
    def summary(self) -> str:
        return f"pure-dp eps={self.epsilon:.3g}"

    def _as_replace_one(self) -> PureDpEvent:
        return PureDpEvent(2 * self.epsilon, Adjacency.REPLACE_ONE)  # group privacy, size 2

    def _fields(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PureDpEvent:
        return cls(float(data["epsilon"]), Adjacency(data["adjacency"]))


@dataclass(frozen=True)
class ZCdpEvent(Mechanism):
    """A mechanism accounted by rho-zero-concentrated DP (Bun and Steinke 2016)."""

    rho: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "zcdp"

    def __post_init__(self) -> None:
        check_nonnegative_finite("ZCdpEvent.rho", self.rho)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

    @property
    def is_free(self) -> bool:
        return self.rho == 0

    @property
    def summary(self) -> str:
        return f"zcdp rho={self.rho:.3g}"

    def _as_replace_one(self) -> ZCdpEvent:
        # Group privacy of size k multiplies rho by k^2 (Bun and Steinke 2016, Prop. 1.9).
        return ZCdpEvent(4 * self.rho, Adjacency.REPLACE_ONE)

    def _fields(self) -> dict[str, Any]:
        return {"rho": self.rho}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ZCdpEvent:
        return cls(float(data["rho"]), Adjacency(data["adjacency"]))
