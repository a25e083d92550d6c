"""A mechanism is its class, its accountant case and its proto message: the
class registers itself by declaring its kind, and everything else (the dict
form, the ledger, the accountant, Kernel.mechanism) finds it there."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.accounting.cases import CASES, case_of
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import (
    MECHANISM_KINDS,
    Adjacency,
    Mechanism,
    NoNoise,
    PureDpEvent,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.mechanisms.base import kernel_noises
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.validation import check_nonnegative_finite, frozen_value
from privadapt.common.wire.messages import WireError, mechanism_from_proto, mechanism_to_proto
from tests.common.mechanisms.test_dp_events import EVENTS, PURE

NEW_KIND = "coin_flip_for_tests"


@pytest.fixture
def coin_flip():
    """A new pure-DP mechanism, declared here and nowhere else."""

    @frozen_value
    class CoinFlip(Mechanism):
        epsilon: float
        adjacency: Adjacency = Adjacency.REPLACE_ONE

        kind: ClassVar[str] = NEW_KIND

        def __post_init__(self) -> None:
            self.epsilon = check_nonnegative_finite("CoinFlip.epsilon", self.epsilon)
            self.adjacency = Adjacency(self.adjacency)

        @property
        def accounted_as(self) -> str:
            return "pure_dp"

        @property
        def is_free(self) -> bool:
            return self.epsilon == 0

        @property
        def pure_epsilon(self) -> float:
            return self.epsilon

        def _fields(self) -> dict[str, Any]:
            return {"epsilon": self.epsilon}

        @classmethod
        def from_dict(cls, data: dict[str, Any]) -> Mechanism:
            return cls(data["epsilon"], Adjacency(data["adjacency"]))

    yield CoinFlip
    del MECHANISM_KINDS[NEW_KIND]


def test_a_new_mechanism_is_known_by_its_class_alone(coin_flip):
    flip = coin_flip(0.5)
    assert MECHANISM_KINDS[NEW_KIND] is coin_flip
    assert mechanism_from_dict(mechanism_to_dict(flip)) == flip
    # Accounted by the case it names, with no accountant edit.
    ours = PrivacyAccountant().compose(flip, 3).get_epsilon(1e-6)
    assert ours == PrivacyAccountant().compose(PureDpEvent(0.5), 3).get_epsilon(1e-6)


def test_a_new_mechanism_without_its_proto_message_is_refused_on_the_wire(coin_flip):
    with pytest.raises(WireError, match="no message in the wire contract"):
        mechanism_to_proto(coin_flip(0.5))


def test_a_kind_is_declared_by_one_class_only(coin_flip):
    with pytest.raises(TypeError, match="declared by both"):
        type("Impostor", (Mechanism,), {"kind": NEW_KIND})


def test_every_kind_is_a_proto_message_and_every_priced_kind_an_accountant_case():
    oneof = pb.Mechanism.DESCRIPTOR.oneofs_by_name["kind"]
    assert {field.name for field in oneof.fields} == set(MECHANISM_KINDS)
    for mechanism in [m for m, _ in EVENTS] + PURE:
        if mechanism.is_free or mechanism.is_non_private:
            continue  # never composed: the accountant drops it or reports inf
        assert case_of(mechanism) in CASES.values()


def test_every_kind_round_trips_through_the_wire():
    for mechanism in [m for m, _ in EVENTS] + PURE:
        assert mechanism_from_proto(mechanism_to_proto(mechanism)) == mechanism


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown mechanism kind 'nope'"):
        mechanism_from_dict({"kind": "nope", "adjacency": "replace_one"})
    with pytest.raises(WireError, match="no kind set"):
        mechanism_from_proto(pb.Mechanism(adjacency="replace_one"))


def test_a_kernel_builds_every_registered_kernel_noise():
    assert set(kernel_noises()) == {"gaussian", "laplace", "discrete_laplace",
                                    "distributed_discrete_gaussian"}
    kernel = get_kernel("linear_gradient")
    params = kernel.Params.from_wire(
        {"weights": np.zeros(3), "loss": "squared", "clip_norm": 1.0}, 3)
    for noise, cls in kernel_noises().items():
        built = kernel.mechanism(params, 2.0, Adjacency.REPLACE_ONE, dim=3, noise=noise,
                                 honest_shares=2)
        assert type(built) is cls
    assert isinstance(kernel.mechanism(params, float("inf"), Adjacency.REPLACE_ONE, dim=3),
                      NoNoise)
    with pytest.raises(ValueError, match="noise must be one of"):
        kernel.mechanism(params, 2.0, Adjacency.REPLACE_ONE, dim=3, noise="zcdp")
