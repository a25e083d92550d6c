"""Review 9b (medium): exact_discrepancy refuses, and latches off, on a site
with no records, while its add/remove neighbour with one record answers.

The site checks the certificate's width against the solver allowance computed
with its *own* n (``solver_allowance(params, dim, data.num_records)``), which
is 0 at n = 0; the zero matrix's bracket has the certificate's underflow slack
as width (measured 1.48e-323 > 0), so the check fails: "the certified error
1.48e-323 exceeds the charged solver error 0". With n = 1 (same public
moments [[0.25, 0], [0, 1/12]], r = Y = Lambda = 1) the kernel answers
0.0833. Under add/remove, n is private, so answered against refused (and the
kernel disabled until restart) is a free release of whether the site holds
any record at all (or, with a record selection, whether its part is empty).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency

KERNEL = get_kernel("exact_discrepancy")
ADJACENCY = Adjacency.ADD_REMOVE_ONE
_LEDGERS = itertools.count()
PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
          "public_moments": np.array([[0.25, 0.0], [0.0, 1.0 / 12.0]])}


def _outcome(tmp_path, num: int) -> str:
    data = Dataset(np.full((num, 1), 0.5), np.zeros(num), ("x0",))
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=ADJACENCY, allow_non_private=True,
                        max_records=4)
    site = Site(data, policy, PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy,
                                            create=True))
    mechanism = KERNEL.mechanism(KERNEL.Params.from_wire(PARAMS, 1), math.inf, ADJACENCY, dim=1)
    query = Query("job", "q", "exact_discrepancy", PARAMS, mechanism, fractional_bits=48)
    try:
        site.answer(query, 1)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return "answered"


def test_review9b_an_empty_site_answers_like_its_one_record_neighbour(tmp_path):
    warnings.simplefilter("ignore", RuntimeWarning)
    assert _outcome(tmp_path, 0) == _outcome(tmp_path, 1)


def test_review9b_the_kernel_answers_on_no_records():
    data = Dataset(np.zeros((0, 1)), np.zeros(0), ("x0",))
    (value,) = KERNEL.compute(data, KERNEL.Params.from_wire(PARAMS, 1), {})
    assert value[0] == 0.0
