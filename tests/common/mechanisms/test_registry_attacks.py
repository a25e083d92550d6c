"""The kind registry, the accountant cases and frozen values under attack: what a
coordinator can send, what a careless new mechanism inherits, and what a site
process knows without the coordinator's modules."""

from __future__ import annotations

import copyreg
import dataclasses
import io
import json
import math
import pickle
import subprocess
import sys
from typing import Any, ClassVar

import pytest

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.mechanisms import (
    MECHANISM_KINDS,
    ExponentialMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    Mechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.validation import frozen_value
from privadapt.common.wire.messages import mechanism_to_proto
from privadapt.server.algorithms.gradient_descent.noisy_gd import paper_noise_multiplier

#: Every kind a site knows, whichever module it imports first (the proto's oneof names the same).
KNOWN_KINDS = {
    "gaussian", "poisson_sampled_gaussian", "laplace", "pure_dp", "zcdp", "no_noise",
    "report_noisy_laplace", "exponential", "generalized_exponential", "discrete_laplace",
    "discrete_exponential", "discrete_report_noisy_laplace", "distributed_discrete_gaussian",
}

_SITE_PROCESS = """
import json, sys
import {first}
from privadapt.common.mechanisms.base import MECHANISM_KINDS
print(json.dumps({{"kinds": sorted(MECHANISM_KINDS),
                  "server": sorted(m for m in sys.modules if m.startswith("privadapt.server"))}}))
"""


@pytest.mark.parametrize("first", ["privadapt.common.mechanisms.base",
                                   "privadapt.common.wire.messages",
                                   "privadapt.client.ledger.privacy_ledger",
                                   "privadapt.client.site"])
def test_a_site_process_knows_every_kind_whatever_it_imports_first(first):
    out = subprocess.run([sys.executable, "-c", _SITE_PROCESS.format(first=first)],
                         capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["server"] == []
    assert set(seen["kinds"]) == KNOWN_KINDS
    oneof = pb.Mechanism.DESCRIPTOR.oneofs_by_name["kind"]
    assert {field.name for field in oneof.fields} == KNOWN_KINDS


def test_a_coordinator_cannot_name_the_accountant_case():
    gaussian = GaussianMechanism.single(1.0, 0.8)
    data = {**mechanism_to_dict(gaussian), "accounted_as": "pure_dp"}
    assert mechanism_from_dict(data).accounted_as == "gaussian"
    message = mechanism_to_proto(gaussian)
    assert "accounted_as" not in {f.name for f in message.gaussian.DESCRIPTOR.fields}
    with pytest.raises(dataclasses.FrozenInstanceError):
        gaussian.accounted_as = "pure_dp"


def test_a_plain_dataclass_subclass_of_a_mechanism_is_refused_in_words():
    """A subclass declared with ``@dataclass(frozen=True)`` has its own frozen
    ``__setattr__``, which refuses the parent's ``__post_init__`` its
    normalising assignments: construction fails closed, saying how to declare it."""

    @dataclasses.dataclass(frozen=True)
    class Tagged(LaplaceMechanism):
        tag: str = ""

    with pytest.raises(TypeError, match="declare it with @frozen_value"):
        Tagged(1.0, 2.0, tag="x")


def test_a_subclass_that_declares_no_kind_is_never_written_to_a_ledger():
    @frozen_value
    class Cheaper(LaplaceMechanism):
        pass

    with pytest.raises(TypeError, match="not a privadapt mechanism"):
        mechanism_to_dict(Cheaper(1.0, 2.0))


def test_a_new_kind_names_its_own_accountant_case_rather_than_inheriting_one():
    """A new selection written as a subclass of the exponential mechanism (say,
    permute-and-flip, which overrides how the index is drawn) that declares a
    new kind and nothing else would inherit ``accounted_as = "bounded_range"``
    and be charged as epsilon-bounded-range (RDP epsilon^2/8, a quarter of pure
    DP's) without anyone having said that it is: the class is refused."""
    new_kind = "permute_and_flip_for_tests"
    try:
        with pytest.raises(TypeError, match="inherits the accountant case of"):
            @frozen_value
            class PermuteAndFlip(ExponentialMechanism):
                kind: ClassVar[str] = new_kind
        assert new_kind not in MECHANISM_KINDS
    finally:
        MECHANISM_KINDS.pop(new_kind, None)


def test_a_refused_kind_declaration_registers_none_of_its_kinds():
    """A class whose second kind is already taken raises, but its first kind
    stays registered to the class that failed."""
    kind = "half_registered_for_tests"
    try:
        with pytest.raises(TypeError, match="declared by both"):
            type("HalfRegistered", (Mechanism,), {"kinds": (kind, "gaussian")})
        assert kind not in MECHANISM_KINDS
    finally:
        MECHANISM_KINDS.pop(kind, None)


def test_a_frozen_mechanism_refuses_every_assignment_path_after_construction():
    laplace = LaplaceMechanism(1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        laplace.scale = 1e-9
    with pytest.raises(dataclasses.FrozenInstanceError):
        laplace.scale = 1e-09
    with pytest.raises(ValueError):
        dataclasses.replace(laplace, scale=-1.0)
    assert laplace.epsilon == 0.5


def test_an_unpickled_mechanism_is_validated():
    """A pickle's state is validated as a construction is, whether it was
    written by ``pickle`` or by hand (NEWOBJ then BUILD with forged fields)."""
    laplace = LaplaceMechanism(1.0, 2.0)
    assert pickle.loads(pickle.dumps(laplace)) == laplace

    class Forging(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is LaplaceMechanism:
                state = {**{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)},
                         "scale": -2.0}
                return copyreg.__newobj__, (LaplaceMechanism,), state
            return NotImplemented

    buffer = io.BytesIO()
    Forging(buffer, protocol=4).dump(laplace)
    with pytest.raises(ValueError):
        pickle.loads(buffer.getvalue())


def test_the_paper_calibration_refuses_a_target_the_accountant_refuses():
    plan = ReleasePlan(10, paper=paper_noise_multiplier)
    for epsilon in (0.0, -1.0, -math.inf):
        with pytest.raises(ValueError):
            noise_multiplier(epsilon, 1e-5, plan, calibration="accountant")
        with pytest.raises(ValueError):
            noise_multiplier(epsilon, 1e-5, plan, calibration="paper")
