"""The ``sites`` table: every site that registered, and when it was last heard from."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from privadapt.server.store.database import StoreDatabase, insert_row, select_rows


@dataclass(frozen=True)
class SiteRecord:
    name: str
    num_records: int
    num_features: int
    kernels: tuple[str, ...]
    policy_version: str
    certificate_expiry: float | None
    first_seen: float
    last_seen: float


#: A stored registration larger than this (its kernel list or policy
#: version, as stored) predates the coordinator's bounds on site messages
#: (server/coordinator/site_messages.py): a 38 MiB kernel list once made ``privadapt
#: sites`` fail for good. Such rows are trimmed when the store opens.
MAX_STORED_FIELD_CHARS = 8192


class SiteTable(StoreDatabase):
    """The store's methods on registered sites."""

    def trim_oversized_registrations(self) -> list[str]:
        """Empty the kernel list and policy version of every stored
        registration whose field exceeds :data:`MAX_STORED_FIELD_CHARS` (the
        site registers again with bounded fields); returns their names."""
        with self._transaction() as conn:
            names = [name for (name,) in conn.execute(
                "SELECT name FROM sites WHERE length(kernels) > ? OR length(policy_version) > ?",
                (MAX_STORED_FIELD_CHARS, MAX_STORED_FIELD_CHARS))]
            conn.executemany("UPDATE sites SET kernels = '[]', policy_version = '' "
                             "WHERE name = ?", [(name,) for name in names])
        return names

    def upsert_site(
        self, name: str, *, num_records: int, num_features: int, kernels: Sequence[str],
        policy_version: str, certificate_expiry: float | None, now: float | None = None,
    ) -> None:
        """Register a site or update its registration (``first_seen`` is kept)."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            row = conn.execute("SELECT first_seen FROM sites WHERE name = ?", (name,)).fetchone()
            site = SiteRecord(name, int(num_records), int(num_features), tuple(kernels),
                              policy_version, certificate_expiry, now if row is None else row[0],
                              now)
            insert_row(conn, "sites", site, replace=True)

    def touch_site(self, name: str, now: float | None = None) -> None:
        """Record that ``name`` was heard from; ``KeyError`` if never registered."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            cur = conn.execute("UPDATE sites SET last_seen = ? WHERE name = ?", (now, name))
            if cur.rowcount == 0:
                raise KeyError(f"site {name!r} is not registered; it must register first")

    def sites(self) -> list[SiteRecord]:
        """Every registered site, by name."""
        return [SiteRecord(**row) for row in select_rows(self._connection(), SiteRecord, "sites",
                                                         "ORDER BY name")]
