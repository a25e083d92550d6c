"""Adversarial review 5: the fixed-point encoding of a site's own value must
not fail on one dataset and succeed on its neighbour.

``QueryAdmission._check_range`` lets a one-site sum (K = 1, or a per-site
answer) through when its public bound is below 2^(63 - f), but
``FixedPointCodec.encode`` refuses a value of 2^(62 - f) or more -- after the
kernel has run on the private records, and uncharged. The coordinator picks f,
so under add/remove (n private) with ``max_records`` = 40,000 it asks f = 47:
32,767 records answer, 32,768 raise OverflowError (whose local
message prints the private value to three digits). A refusal is an output
(issue 17): the two neighbours must get the same outcome and the same words.
"""

from __future__ import annotations

import numpy as np

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, DiscreteLaplaceMechanism
from privadapt.common.noise.floating import SeededRandomBits

BITS = 47  # threshold 2^(62 - 47) = 32,768 records; range 2^16 > max_records
MAX_RECORDS = 40_000


def outcome(tmp_path, num: int) -> str:
    policy = SitePolicy("s", 10.0, 1e-6, adjacency=Adjacency.ADD_REMOVE_ONE,
                        max_records=MAX_RECORDS)
    data = Dataset(np.zeros((num, 2)), np.zeros(num), ("a", "b"))
    site = Site(data, policy, PrivacyLedger(tmp_path / f"{num}.db", policy, create=True),
                SeededRandomBits(0))
    kernel = get_kernel("record_count")
    (charged,) = kernel.charged_sensitivities(kernel.Params.from_wire({}, 2), policy.adjacency,
                                              "l1", 2, BITS, MAX_RECORDS)
    mechanism = DiscreteLaplaceMechanism.for_noise_multiplier(charged, 0.2, BITS,
                                                              policy.adjacency)
    try:
        site.answer(Query("j", "q", "record_count", {}, mechanism, fractional_bits=BITS), 1)
    except Exception as err:  # any outcome is compared
        return f"{type(err).__name__}: {err}"
    return "answered"


def test_neighbours_at_the_encoding_threshold_get_the_same_outcome(tmp_path):
    below = outcome(tmp_path, 2**15 - 1)
    above = outcome(tmp_path, 2**15)
    assert below == above, (below, above)
