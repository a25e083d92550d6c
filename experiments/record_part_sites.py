"""In-process sites whose records are split into a training and a validation
part, both charging the site's one ledger under one job id: a simulation of
what record parts (``federation.restricted_to(RecordPart(...))``) give a
networked job, for experiments and tests until every caller uses those.

Each site's split is a random permutation of its own records (seeded here; a
real site draws its part by a content hash), so the parts are disjoint and
their union is the site's data. Two ``LocalFederation`` views share the
sites' policies and ledgers: a charge on either counts against the same cap
and appears in the same job's report, as one job on record parts would.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from privadapt import Dataset, LocalFederation
from privadapt.client.ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.noise import SeededRandomBits


def split_rows(num_records: int, validation_fraction: float, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows) of one site: a random validation part of
    round(fraction n) records, at least one record in each part."""
    order = rng.permutation(num_records)
    cut = min(max(1, round(validation_fraction * num_records)), num_records - 1)
    return np.sort(order[cut:]), np.sort(order[:cut])


def split_datasets(datasets: Sequence[Dataset], validation_fraction: float, seed: int
                   ) -> tuple[list[Dataset], list[Dataset]]:
    """(training parts, validation parts) of every site's records (split_rows)."""
    rng = np.random.default_rng(seed)
    train, validation = [], []
    for data in datasets:
        for parts, rows in zip((train, validation),
                               split_rows(data.num_records, validation_fraction, rng),
                               strict=True):
            parts.append(Dataset(data.features[rows], data.labels[rows], data.feature_names))
    return train, validation


@contextmanager
def record_part_federations(
    train_parts: Sequence[Dataset],
    validation_parts: Sequence[Dataset],
    *,
    noise_seed: int,
    epsilon_cap: float,
    delta_cap: float,
    **policy_options: Any,
) -> Iterator[tuple[LocalFederation, LocalFederation]]:
    """(train, validation) federations over each site's two record parts
    (``split_datasets``), one policy, ledger and job id per site shared by
    both (module docstring). The two views draw different noise streams
    (seeds ``noise_seed`` and ``noise_seed + 1``, per site as
    ``LocalFederation.from_datasets`` does)."""
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory(prefix="privadapt-parts-") as directory:
        ledgers, views = [], ([], [])
        for k, own_parts in enumerate(zip(train_parts, validation_parts, strict=True)):
            name = f"site-{k + 1}"
            policy = SitePolicy(name, epsilon_cap, delta_cap, **policy_options)
            ledger = PrivacyLedger(Path(directory) / f"{name}.ledger.db", policy, create=True)
            ledgers.append(ledger)
            for view, part, seed in zip(views, own_parts, (noise_seed, noise_seed + 1),
                                        strict=True):
                view.append(Site(part, policy, ledger, SeededRandomBits(seed * 100 + k)))
        train, validation = (LocalFederation(view, job_id=job_id) for view in views)
        # One job numbers its queries once: the sites refuse a query id
        # charged before (replay protection), whichever view sent it.
        validation._query_numbers = train._query_numbers
        try:
            yield train, validation
        finally:
            for ledger in ledgers:
                ledger.close()
