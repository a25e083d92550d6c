"""Accounting-only events: a privacy cost stated directly, with no kernel
sum released through them (a pure epsilon-DP event and a zCDP event)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from privadapt.common.mechanisms.base import Adjacency, Mechanism, pure_dp_event
from privadapt.common.validation import check_nonnegative_finite, frozen_value

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


@frozen_value
class PureDpEvent(Mechanism):
    """A mechanism accounted as pure epsilon-DP (e.g. an exponential mechanism
    run entirely at one site). dp-accounting has no event for "some
    epsilon-DP release": its event is randomized response over two buckets,
    the tight epsilon-DP pair that dominates every one (:func:`.base.pure_dp_event`)."""

    epsilon: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "pure_dp"

    def __post_init__(self) -> None:
        check_nonnegative_finite("PureDpEvent.epsilon", self.epsilon)
        self.adjacency = Adjacency(self.adjacency)

    @property
    def is_free(self) -> bool:
        return self.epsilon == 0

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    @property
    def summary(self) -> str:
        return f"pure-dp eps={self.epsilon:.3g}"

    def _dp_event(self) -> DpEvent:
        return pure_dp_event(self.epsilon)

    def _as_replace_one(self) -> PureDpEvent:
        return PureDpEvent(2 * self.epsilon, Adjacency.REPLACE_ONE)  # group privacy, size 2

    def _fields(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PureDpEvent:
        return cls(float(data["epsilon"]), Adjacency(data["adjacency"]))


@frozen_value
class ZCdpEvent(Mechanism):
    """A mechanism accounted by rho-zero-concentrated DP (Bun and Steinke 2016):
    dp-accounting's ``ZCDpEvent(rho)``."""

    rho: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "zcdp"

    def __post_init__(self) -> None:
        check_nonnegative_finite("ZCdpEvent.rho", self.rho)
        self.adjacency = Adjacency(self.adjacency)

    @property
    def is_free(self) -> bool:
        return self.rho == 0

    @property
    def summary(self) -> str:
        return f"zcdp rho={self.rho:.3g}"

    def _dp_event(self) -> DpEvent:
        from dp_accounting import dp_event

        return dp_event.ZCDpEvent(self.rho)

    def _as_replace_one(self) -> ZCdpEvent:
        # Group privacy of size k multiplies rho by k^2 (Bun and Steinke 2016, Prop. 1.9).
        return ZCdpEvent(4 * self.rho, Adjacency.REPLACE_ONE)

    def _fields(self) -> dict[str, Any]:
        return {"rho": self.rho}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ZCdpEvent:
        return cls(float(data["rho"]), Adjacency(data["adjacency"]))
