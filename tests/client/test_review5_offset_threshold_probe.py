"""Adversarial review 5 (critical): public score offsets turn the fixed-point
encoding's own range limit into a free, exact threshold test of a private sum.

``validation_loss`` adds the coordinator's public ``score_offsets`` o_k to a
site's private scores s_k. The admission's range check passes when
N_max L + |o| < 2^(63 - f), but ``FixedPointCodec.encode`` refuses a value of
2^(62 - f) or more after the kernel ran, uncharged. With o_0 = 2^(62 - f) - x0
the site errors exactly when s_0 >= x0: a binary search reads s_0 to 1e-6 in
30 probes, 16 of them uncharged errors and 14 selections at epsilon 1e-9 each
(ledger: epsilon 0 at delta 1e-6) -- /tmp/review5/offset_binary_search.py.
Here: add/remove neighbours whose score differs by one record's clipped loss,
with the threshold between them, must get the same outcome (the selection
path; ``Site._select`` encodes the scores the same way).
"""

from __future__ import annotations

import numpy as np

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, DiscreteExponentialMechanism
from privadapt.common.noise.floating import SeededRandomBits

BITS = 32
CANDIDATES = np.array([[1.0, -0.5], [0.0, 0.0]])
SCORES = {"candidates": CANDIDATES, "loss": "logistic", "loss_bound": 1.0}
RNG = np.random.default_rng(0)
FEATURES = RNG.normal(size=(50, 2))
LABELS = np.where(RNG.random(50) < 0.5, -1.0, 1.0)


def neighbours() -> tuple[Dataset, Dataset]:
    """The base records, and the base plus one record whose loss clips at L = 1."""
    extra = np.array([[-40.0, 20.0]])  # margin -50 under candidate 0: loss ~50, clipped to 1
    return (Dataset(FEATURES, LABELS, ("a", "b")),
            Dataset(np.vstack([FEATURES, extra]), np.append(LABELS, 1.0), ("a", "b")))


def outcome(tmp_path, tag: str, data: Dataset, offset: float) -> str:
    policy = SitePolicy("s", 10.0, 1e-6, adjacency=Adjacency.ADD_REMOVE_ONE)
    site = Site(data, policy, PrivacyLedger(tmp_path / f"{tag}.db", policy, create=True),
                SeededRandomBits(0))
    params = dict(SCORES, score_offsets=np.array([offset, 0.0]))
    mechanism = DiscreteExponentialMechanism(2.0, 0.5, BITS, adjacency=Adjacency.ADD_REMOVE_ONE)
    try:
        site.answer(Query("j", "q", "validation_loss", params, mechanism, fractional_bits=BITS,
                          form=ReleaseForm.PER_SITE), 1)
    except Exception as err:  # any outcome is compared
        return f"{type(err).__name__}: {err}"
    return "answered"


def test_a_public_offset_cannot_put_the_encoding_limit_between_neighbours(tmp_path):
    base, neighbour = neighbours()
    kernel = get_kernel("validation_loss")
    (scores,) = kernel.compute(base, kernel.Params.from_wire(SCORES, 2), {})
    offset = 2.0 ** (62 - BITS) - float(scores[0]) - 0.5  # threshold at s_0 + 1/2
    first = outcome(tmp_path, "a", base, offset)
    second = outcome(tmp_path, "b", neighbour, offset)
    assert first == second, (first, second)
