"""The ``audit`` table: an append-only log (triggers refuse updates and deletes)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from privadapt.server.store.database import StoreDatabase, select_rows


@dataclass(frozen=True)
class AuditEntry:
    id: int
    timestamp: float
    event: str
    job_id: str | None
    site_name: str | None
    detail: str


class AuditLog(StoreDatabase):
    """The store's methods on the audit log."""

    def audit(
        self, event: str, *, job_id: str | None = None, site_name: str | None = None,
        detail: str = "",
    ) -> None:
        """Append one entry to the audit log (which triggers keep append-only)."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO audit (timestamp, event, job_id, site_name, detail) "
                "VALUES (?, ?, ?, ?, ?)", (time.time(), event, job_id, site_name, detail),
            )

    def audit_log(self, job_id: str | None = None) -> list[AuditEntry]:
        """Audit entries (of ``job_id`` if given), oldest first."""
        where, args = ("", ()) if job_id is None else ("WHERE job_id = ?", (job_id,))
        rows = select_rows(self._connection(), AuditEntry, "audit", where + " ORDER BY id", args)
        return [AuditEntry(**row) for row in rows]
