"""The spread of a certificate's work over neighbouring datasets is zero, for
every kernel a latch guards, through the whole site: ``Site.answer`` from
admission to charge, the latch's arming and ending in the ledger included.

The latch leaves where the first failure falls (client/ledger/latches.py);
a certificate whose work depended on the data would add a timing channel on
every query. Not a timing assertion: every numerical operation and ledger
write is recorded with the shapes it ran on, and the spread is the difference
in their number and in the total size of their arguments between neighbours
(replace one record, add one, and the empty site against one record). The
wall-clock spread, which also holds what LAPACK itself varies with the
values, is measured by benchmarks/certificate_timing.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel, registered_kernels
from privadapt.common.mechanisms import Adjacency
from tests.client.test_certificate_fixed_work import traced

DIM = 3
NAMES = tuple(f"x{i}" for i in range(DIM))
FRACTIONAL_BITS = 32
#: Public parameters of each kernel a latch guards.
PARAMS = {
    "exact_discrepancy": {"feature_norm": 1.0, "label_bound": 1.0, "radius": 3.0,
                          "public_moments": np.diag([0.3, 0.2, 0.1, 0.5])},
    "smoothed_discrepancy_gradient": {
        "feature_norm": 1.0, "source_points": np.array([[1.0, 0, 0], [0, 0.6, 0.8]]),
        "weights": np.array([0.5, 0.5]), "mu": 2.0},
}
_LEDGERS = itertools.count()
_RNG = np.random.default_rng(11)
FEATURES = _RNG.normal(size=(12, DIM)) * 0.4
LABELS = np.linspace(-1.0, 1.0, 12)


def pairs() -> list[tuple[str, Adjacency, Dataset, Dataset]]:
    """(name, adjacency, dataset, neighbour): a record replaced by an extreme
    one, one added, and the empty site against one record."""
    extreme = np.zeros(DIM)
    extreme[0] = 1.0
    replaced_x, replaced_y = FEATURES.copy(), LABELS.copy()
    replaced_x[0], replaced_y[0] = extreme, -1.0
    base = Dataset(FEATURES, LABELS, NAMES)
    return [
        ("replace", Adjacency.REPLACE_ONE, base, Dataset(replaced_x, replaced_y, NAMES)),
        ("add", Adjacency.ADD_REMOVE_ONE, base,
         Dataset(np.vstack([FEATURES, extreme]), np.append(LABELS, -1.0), NAMES)),
        ("empty", Adjacency.ADD_REMOVE_ONE, Dataset(np.zeros((0, DIM)), np.zeros(0), NAMES),
         Dataset(FEATURES[:1], LABELS[:1], NAMES)),
    ]


def traced_answer(tmp_path, kernel_name: str, adjacency: Adjacency, data: Dataset,
                  monkeypatch) -> tuple[list, str]:
    """The operations of one ``Site.answer`` (noise multiplier 2) and its
    outcome, the ledger's certificate writes and charge among them."""
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True,
                        max_records=32)
    site = Site(data, policy, PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy,
                                            create=True))
    kernel, params = get_kernel(kernel_name), PARAMS[kernel_name]
    mechanism = kernel.mechanism(kernel.Params.from_wire(params, DIM), 2.0, adjacency,
                                 dim=DIM, fractional_bits=FRACTIONAL_BITS, max_records=32)
    query = Query("job", "q", kernel_name, params, mechanism, fractional_bits=FRACTIONAL_BITS)
    writes: list = []
    with monkeypatch.context() as patch:
        for method in ("arm_certificate", "end_certificate", "charge"):
            original = getattr(PrivacyLedger, method)

            def recorded(self, *args, _name=method, _original=original, **kwargs):
                writes.append((_name, ()))
                return _original(self, *args, **kwargs)

            patch.setattr(PrivacyLedger, method, recorded)
        operations, outcome = traced(lambda: site.answer(query, 1))
    # The ledger writes in order, then the numerical operations in order.
    site.ledger.close()
    return writes + operations, outcome


def spread(first: list, second: list) -> tuple[int, int]:
    """(difference in the number of operations, in the total size of their
    arguments): what a reply's time could say beyond the shapes."""
    def size(trace: list) -> int:
        return sum(math.prod(shape) for _, shapes in trace for shape in shapes)

    return abs(len(first) - len(second)), abs(size(first) - size(second))


def test_every_kernel_a_latch_guards_is_measured_here():
    # Other tests register probe kernels named test_*; every real one counts.
    guarded = {name for name in registered_kernels()
               if not name.startswith("test_") and get_kernel(name).certifies_own_error}
    assert guarded == set(PARAMS)


@pytest.mark.parametrize("kernel_name", sorted(PARAMS))
@pytest.mark.parametrize(("pair", "adjacency", "data", "neighbour"), pairs(),
                         ids=[case[0] for case in pairs()])
def test_the_certificates_work_has_no_spread_on_neighbours(
        tmp_path, monkeypatch, kernel_name, pair, adjacency, data, neighbour):
    first, first_outcome = traced_answer(tmp_path, kernel_name, adjacency, data, monkeypatch)
    second, second_outcome = traced_answer(tmp_path, kernel_name, adjacency, neighbour,
                                           monkeypatch)
    assert first_outcome == second_outcome == "answered"
    names = [name for name, _ in first]
    # The certificate ran, armed and ended in the ledger, and was charged.
    assert names[:3] == ["arm_certificate", "end_certificate", "charge"]
    assert "eigh" in names and len(names) > 3
    assert spread(first, second) == (0, 0)
    assert first == second
