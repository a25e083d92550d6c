"""frozen_value: a frozen dataclass whose __post_init__ stores its fields
validated, by assignment, and that is frozen like any other afterwards."""

from __future__ import annotations

import dataclasses
import pickle
import threading

import pytest

from privadapt.client.policy import SitePolicy
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, ReportNoisyMin
from privadapt.common.validation import frozen_value


@frozen_value
class Interval:
    low: float
    high: float = 1.0

    def __post_init__(self) -> None:
        self.low, self.high = float(min(self.low, self.high)), float(max(self.low, self.high))


@dataclasses.dataclass(frozen=True)
class PlainInterval:
    low: float
    high: float = 1.0


@frozen_value
class Outer:
    inner: Interval

    def __post_init__(self) -> None:
        self.inner = Interval(self.inner.high, self.inner.low)
        with pytest.raises(dataclasses.FrozenInstanceError):
            self.inner.low = 0.0  # built inside, frozen all the same


def test_post_init_stores_normalised_fields():
    interval = Interval(3, 2)
    assert (interval.low, interval.high) == (2.0, 3.0)
    assert type(interval.low) is float


def test_a_frozen_value_refuses_assignment_after_construction():
    interval = Interval(0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        interval.low = 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        del interval.high
    mechanism = ReportNoisyMin(1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        mechanism.scale = 1e-9


def test_only_the_instance_being_built_may_assign():
    Outer(Interval(0.25, 0.75))


def test_equality_and_hash_are_a_plain_frozen_dataclasses():
    assert Interval(0.5) == Interval(0.5, 1) and Interval(0.5) != Interval(0.25)
    assert hash(Interval(0.5)) == hash(PlainInterval(0.5))
    assert Interval(0.5) != PlainInterval(0.5)
    assert repr(Interval(0.5)) == "Interval(low=0.5, high=1.0)"


def test_replace_revalidates_and_a_pickle_round_trips():
    interval = dataclasses.replace(Interval(0.5), high=0.25)
    assert (interval.low, interval.high) == (0.25, 0.5)
    policy = SitePolicy("site-a", 1.0, 1e-5, adjacency="add_remove_one")
    assert pickle.loads(pickle.dumps(policy)) == policy
    assert policy.adjacency is Adjacency.ADD_REMOVE_ONE


def test_instances_built_in_threads_freeze_independently():
    built: list[GaussianMechanism] = []

    def build() -> None:
        built.extend(GaussianMechanism.single(1.0, 2.0) for _ in range(200))

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 800
    for mechanism in built[::97]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            mechanism.sampling_rate = 0.5
