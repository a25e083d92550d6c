"""The coordinator's state database: what a restarted coordinator resumes from.

DESIGN.md section 7. One SQLite file per deployment (WAL mode) holding the
registered sites, jobs, one row per round *attempt* (aborted ones included, so
the privacy report can say what the sites were charged for), the aggregated
answer of every finished algorithm step, model checkpoints, final results and
an append-only audit log.

:class:`CoordinatorStore` is the one object callers use; its methods live with
their tables, one module each: ``sites``, ``jobs``, ``rounds`` (round attempts
and step answers), ``models`` (checkpoints and results, their arrays in
``arrays``) and ``audit``. The schema, its upgrades, the connections and the
durability contract are in ``database``. This package is where callers import
the store and its records from.
"""

from __future__ import annotations

from privadapt.server.store.audit import AuditEntry, AuditLog
from privadapt.server.store.database import SCHEMA_VERSION
from privadapt.server.store.jobs import FINISHED_STATES, JOB_STATES, JobRecord, JobTable
from privadapt.server.store.models import ModelTable
from privadapt.server.store.rounds import ROUND_STATES, RoundRecord, RoundTable, StoredAnswer
from privadapt.server.store.sites import SiteRecord, SiteTable

__all__ = [
    "FINISHED_STATES",
    "JOB_STATES",
    "ROUND_STATES",
    "SCHEMA_VERSION",
    "AuditEntry",
    "CoordinatorStore",
    "JobRecord",
    "RoundRecord",
    "SiteRecord",
    "StoredAnswer",
]


class CoordinatorStore(SiteTable, JobTable, RoundTable, ModelTable, AuditLog):
    """The coordinator's database at ``path``, created if missing (an older
    schema is upgraded in place).

    Raises ``ConfigError`` for a file that is not a privadapt coordinator store
    or was written by a newer privadapt. Every method that writes has committed
    before it returns; each thread uses its own connection."""
