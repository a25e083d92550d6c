"""Review 9b (medium, a data-dependent refusal and latch at a reachable input):
exact_discrepancy's certificate fails, or crashes, on an honest-looking query
whose moment difference has an exactly zero quadratic part and a tiny linear
part, so whether a site answers depends on one record.

Setting (d = 1, r = Y = 1, Lambda = 1, replace-one, N = 24). The coordinator
guesses the data: twelve records x = 0.5, y = 0 (S = [[3, 0], [0, 0]]), and
sends public moments M = [[0.25, m], [m, 1/12]] -- positive definite, within
the clip region, accepted by ``from_wire``. On the guessed dataset D
= 12 M - S = [[0, 12 m], [12 m, 1]]: A = 0 exactly, b = -12 m. Measured with
``ExactDiscrepancy.compute`` (same machine, numpy/LAPACK of .venv):

* m = 1e-40: "certified error 2.45 exceeds the charged solver error 4.0e-..."
  (UncertifiedComputationError); m = 1e-50: certified error 2.45e10;
  m = 1e-300: 1.68e240 (the dual bound's width grows like 1 / m);
* m = 1e-320 .. 1e-310: a raw ``ValueError: array must not contain infs or
  NaNs`` from scipy's cho_solve inside ``_refine`` (``_candidates``), which is
  not an UncertifiedComputationError, so the site neither words it publicly
  nor latches;
* m = 1e-25 and smaller exponents of the gap still answer (1.0), as does m = 0.

On the replace-one neighbour D' (one x = 0.25 instead of 0.5, so A != 0)
every one of these answers 1.1875. So "answered" against "refused" (and the
kernel latched off until restart) tells D from D' with probability 1, at
zero charge; and since the latch is in memory only, each site restart lets
the coordinator ask again (a fresh Site refuses again on D). This is not the
"LAPACK broke its accuracy" case the docstring reserves the refusal for: it
is the certificate's own dual bound (mu -> 0 with H = mu I, linear part tiny)
on an exactly linear problem.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency

KERNEL = get_kernel("exact_discrepancy")
ADJACENCY = Adjacency.REPLACE_ONE
_LEDGERS = itertools.count()


def _neighbours() -> tuple[Dataset, Dataset]:
    features, labels = np.full((12, 1), 0.5), np.zeros(12)
    other = features.copy()
    other[0] = 0.25
    return Dataset(features, labels, ("x0",)), Dataset(other, labels, ("x0",))


def _params(off_diagonal: float) -> dict:
    moments = np.array([[0.25, off_diagonal], [off_diagonal, 1.0 / 12.0]])
    return {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0, "public_moments": moments}


def _site(tmp_path, data: Dataset) -> Site:
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=ADJACENCY, allow_non_private=True,
                        max_records=24)
    path = tmp_path / f"ledger-{next(_LEDGERS)}.db"
    return Site(data, policy, PrivacyLedger(path, policy, create=True))


def _query(params: dict, tag: str) -> Query:
    mechanism = KERNEL.mechanism(KERNEL.Params.from_wire(params, 1), math.inf, ADJACENCY, dim=1)
    return Query("job", f"q-{tag}", "exact_discrepancy", params, mechanism, fractional_bits=48)


def _outcome(site: Site, params: dict, tag: str) -> str:
    try:
        site.answer(_query(params, tag), 1)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return "answered"


@pytest.mark.parametrize("off_diagonal", [1e-40, 1e-100, 1e-300, 1e-315])
def test_review9b_answer_or_refusal_does_not_depend_on_one_record(tmp_path, off_diagonal):
    warnings.simplefilter("ignore", RuntimeWarning)
    params = _params(off_diagonal)
    data, neighbour = _neighbours()
    on_data = _outcome(_site(tmp_path, data), params, "a")
    on_neighbour = _outcome(_site(tmp_path, neighbour), params, "a")
    # Measured: D refused (or ValueError at 1e-315), D' answered.
    assert on_data == on_neighbour, (on_data, on_neighbour)


def test_review9b_the_kernel_answers_a_linear_problem_with_a_tiny_slope():
    # The kernel alone, no site: the certificate must fit on an input that
    # clipped honest moments can give (A = 0 exactly, b = -1.2e-39).
    params = KERNEL.Params.from_wire(_params(1e-40), 1)
    data, _ = _neighbours()
    (value,) = KERNEL.compute(data, params, {})
    assert value[0] == pytest.approx(1.0)


def test_review9b_a_restart_lets_the_same_bit_be_asked_again(tmp_path):
    warnings.simplefilter("ignore", RuntimeWarning)
    params = _params(1e-40)
    data, _ = _neighbours()
    outcomes = [_outcome(_site(tmp_path, data), params, f"r{i}") for i in range(3)]
    # Each restart (a new Site, as after the operator restarts the process)
    # answers the coordinator's question afresh: three free bits, not one.
    assert all(outcome == "answered" for outcome in outcomes), outcomes


def test_review9b_the_raw_error_path_neither_words_nor_latches(tmp_path):
    # m = 1e-315: a ValueError (scipy's cho_solve on non-finite factors) used
    # to escape Site.answer with scipy's words and leave the kernel enabled, so
    # the same site could be asked again and again. A non-finite solve is now
    # one failed attempt of the certificate, and the tolerance-sized shift
    # certifies the problem: the site answers, every time, and latches nothing.
    warnings.simplefilter("ignore", RuntimeWarning)
    data, _ = _neighbours()
    each = _site(tmp_path, data)
    outcomes = [_outcome(each, _params(1e-315), f"v{i}") for i in range(3)]
    assert each.disabled_kernels == frozenset()
    assert all(outcome == "answered" for outcome in outcomes), outcomes
