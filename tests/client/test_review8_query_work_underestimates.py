"""Review 8, the site policy's ``max_query_work``: the estimate must bound the
work a coordinator can make one query cost. ``validation_loss`` with the
softmax cross-entropy takes candidates of shape (K, d, C) and computes K C
products per record, but ``ValidationLoss.work`` is n d K: the class count C,
a public parameter with no cap of its own, is missing. Measured on this
machine (d = 2, n = 2,000, K = 1): C = 2 costs 0.001 s CPU for an estimate of
4,000; C = 200,000 (a 3.2 MB query) costs 36.5 s CPU for the same estimate of
4,000 multiply-adds, about 40,000x the CPU per estimated unit of the benign
query, so a site capping max_query_work at 1e6 still runs it (n = 20,000:
about six minutes). Fixed: the estimate is n d K C, the site refuses more
than MAX_SCORED_COLUMNS = 2^16 scored columns (K C) when it parses the
query, and the kernel's chunks are sized by K C.
"""

from __future__ import annotations

import numpy as np

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.validation_loss import ValidationLoss
from privadapt.common.mechanisms import Adjacency

KERNEL = get_kernel("validation_loss")
DIM, NUM = 2, 40


def softmax_wire(classes: int) -> dict:
    rng = np.random.default_rng(8)
    return {"candidates": rng.normal(size=(1, DIM, classes)),
            "loss": "softmax_cross_entropy", "loss_bound": 1.0}


def test_the_softmax_estimate_counts_the_classes():
    # One candidate of C classes costs about n d C multiply-adds (the
    # products alone; half of it is allowed for slack).
    for classes in (2, 1_000, 60_000):
        params = KERNEL.Params.from_wire(softmax_wire(classes), DIM)
        assert KERNEL.work(params, DIM, NUM) >= NUM * DIM * classes / 2, classes


def test_a_site_capping_the_work_refuses_a_huge_class_count(tmp_path, monkeypatch):
    # Through the real site path: the cap is 100x the products of a C = 2
    # query; a C = 200,000 query is 1,000x that and must be refused before
    # any record is read.
    def fail(*args, **kwargs):
        raise AssertionError("the kernel ran: the cap admitted a query of 60,000 classes")

    monkeypatch.setattr(ValidationLoss, "compute", fail)
    wire = softmax_wire(60_000)
    typed = KERNEL.Params.from_wire(wire, DIM)
    query = Query("job", "q", KERNEL.name, wire,
                  KERNEL.mechanism(typed, 2.0, Adjacency.REPLACE_ONE, dim=DIM,
                                   max_records=100))
    rng = np.random.default_rng(3)
    data = Dataset(rng.normal(size=(NUM, DIM)), rng.integers(0, 2, NUM).astype(float),
                   ("x0", "x1"))
    policy = SitePolicy("s", 20.0, 1e-5, adjacency=Adjacency.REPLACE_ONE,
                        max_query_work=100.0 * NUM * DIM * 2)
    ledger = PrivacyLedger(tmp_path / "l.db", policy, create=True)
    try:
        Site(data, policy, ledger).answer(query, 1)
    except QueryRefusedError as err:
        assert "max_query_work" in str(err)
        assert not ledger.charges()
    else:
        raise AssertionError("the site answered a query over its max_query_work")


def test_more_scored_columns_than_a_site_scores_are_refused_when_parsed():
    import pytest

    with pytest.raises(ValueError, match="scored columns"):
        KERNEL.Params.from_wire(softmax_wire(200_000), DIM)


def test_the_softmax_working_memory_does_not_grow_with_the_records():
    # ValidationLoss.compute sizes its chunks as CHUNK_RECORDS // K rows "so
    # that the (rows, K) losses stay within the working memory of
    # CHUNK_RECORDS records of one candidate, whatever K is sent" (about
    # 128 kB of losses), but each softmax row also holds C logits and their
    # temporaries: about 47 bytes per (record, class), for min(n, 16,384)
    # records. Measured: C = 100,000 peaks at 558 MB RSS for n = 100 and
    # 1,957 MB for n = 400, so a 23 GB site fails (MemoryError -> an INTERNAL
    # refusal, or the OOM killer) from about n = 4,700 on: under add/remove,
    # where n is private, whether the site answers tells whether n is above
    # a threshold the coordinator picked through C (an unpriced,
    # data-dependent failure, as review 7's nearest-source case). Here the
    # peak must stay under 32 MB (256x the losses the comment promises).
    import tracemalloc

    rng = np.random.default_rng(5)
    classes, records = 20_000, 400
    params = KERNEL.Params.from_wire(softmax_wire(classes), DIM)
    data = Dataset(rng.normal(size=(records, DIM)),
                   rng.integers(0, 2, records).astype(float), ("x0", "x1"))
    tracemalloc.start()
    try:
        KERNEL.compute(data, params, {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.0f} MB at n = {records}, C = {classes}"
