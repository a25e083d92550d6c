"""Review 10a (low; a residual certified_quadratic's docstring already names):
the certificate's schedule is fixed, but the trust-region SOLVER that runs
before it is not, so exact_discrepancy's work still follows the records.
``maximize_quadratic_on_ball`` skips its ``eigh`` when A = 0 and b = 0
(which the empty site's D = 0 always is, and a one-record neighbour's
generally is not), and Brent's method takes a data-dependent number of
secular-equation evaluations. tests/client/test_certificate_fixed_work.py
filters the solver's ``eigh`` out of its traces (``certificate_only``), so it
does not see this.

Measured (d = 1, r = Y = Lambda = 1, M_pub = diag(1/4, 1/12), 300 runs,
median of ``ExactDiscrepancy.compute``): n = 0: 3.74 ms, 0 eigh, 0 Brent
evaluations; n = 1 (x = 0.5, y = 0.5): 3.91 ms, 2 eigh, 4 evaluations; the
0.17 ms gap is ~4% of the reply and a few times the run-to-run spread of the
median, so a coordinator that times repeated (charged) queries reads whether
the site (or its part) is empty beyond the charge.

This test FAILED on main at 4634877 (the counts differed on add/remove and
replace-one neighbours). Fixed by me: the solver always runs one eigh and a
secular solve of a fixed number of bisection steps (common/numerics/trust_region.py,
"Fixed work"); the count of Brent's evaluations became that of the secular
residual's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import privadapt.common.numerics.trust_region as trust_region
from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel

KERNEL = get_kernel("exact_discrepancy")
PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
          "public_moments": np.array([[0.25, 0.0], [0.0, 1.0 / 12.0]])}


def solver_work(data: Dataset, monkeypatch) -> tuple[int, int]:
    """(eigh calls, secular-equation evaluations) of one compute."""
    counts = {"eigh": 0, "secular": 0}
    eigh, residual = np.linalg.eigh, trust_region._secular_residual

    def counted_eigh(*args, **kwargs):
        counts["eigh"] += 1
        return eigh(*args, **kwargs)

    def counted_residual(*args):
        counts["secular"] += 1
        return residual(*args)

    with monkeypatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        patch.setattr(np.linalg, "eigh", counted_eigh)
        patch.setattr(trust_region, "_secular_residual", counted_residual)
        KERNEL.compute(data, KERNEL.Params.from_wire(PARAMS, 1), {})
    return counts["eigh"], counts["secular"]


def records(labels: list[float]) -> Dataset:
    return Dataset(np.full((len(labels), 1), 0.5), np.array(labels, dtype=float), ("x0",))


@pytest.mark.parametrize(("first", "second"), [
    ([], [0.5]),            # add/remove: the empty site and one record
    ([0.0], [0.5]),         # replace-one: one label changed
    ([0.0] * 12, [0.5] + [0.0] * 11),
])
def test_review10a_the_solver_before_the_certificate_does_the_same_work(
        first, second, monkeypatch):
    assert solver_work(records(first), monkeypatch) == solver_work(records(second), monkeypatch)
