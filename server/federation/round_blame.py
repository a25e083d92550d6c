"""Which participant broke a round (a participant may lie).

Two faults are provable, so the job leaves the site out for good
(``RoundFailedError.blamed``) instead of aborting retry after retry at the
honest sites' expense:

* a wrong integrity check. Every site sends, with its share, the private half
  of the check key it signed into the roster (:mod:`privadapt.common.secure.secagg`:
  that key masked the constant 1 and nothing else, so it reveals nothing about
  any block). When the checks do not sum to K, the coordinator recomputes the
  check each site had to send from its key and the roster
  (:func:`~privadapt.common.secure.secagg.blame_integrity_checks`); a site whose key
  is not the one it signed, or whose check differs, is named. An honest site's
  check is exactly what its signed key gives, whatever the others send.
* a replay refusal after the roster. A site refuses a replayed round when it
  is announced, before it publishes a key; a site that published its key and
  then claims a replay (after the others have answered and been charged) is
  aborting the round on purpose.

A site that is merely slow or absent is not blamed here: it is left out until
it reconnects (``NetworkFederation``), as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure.roster import RosterError, verify_roster
from privadapt.common.secure.secagg import blame_integrity_checks
from privadapt.common.wire.messages import signed_key_from_proto


def blame_wrong_checks(
    keys: Mapping[str, pb.KeyAnnouncement],
    shares: Mapping[str, pb.MaskedShare],
    checks: Mapping[str, np.ndarray],
    ca_certificate_pem: bytes | None,
    *,
    job_id: str,
    round: int,
    query_id: str,
    query_digest: bytes,
) -> tuple[str, ...] | None:
    """The sites whose integrity check is not what their signed check key
    gives (sorted), or None when it cannot be judged: no CA to verify the
    roster against, or a roster that does not verify (the sites refused it
    themselves then)."""
    if ca_certificate_pem is None:
        return None
    participants = sorted(keys)
    entries = [signed_key_from_proto(keys[name]) for name in participants]
    try:
        roster = verify_roster(entries, ca_certificate_pem, job_id, round, 1, participants[0],
                               query_digest=query_digest)
    except RosterError:
        return None
    revealed = {name: shares[name].check_private_key for name in participants}
    return blame_integrity_checks(roster, query_id, dict(checks), revealed)


def blame_late_replays(refusals: Sequence[pb.Refusal], roster_sites: Sequence[str]
                       ) -> tuple[str, ...]:
    """Sites that refused as a replay a round whose roster held their key."""
    return tuple(sorted(r.site_name for r in refusals
                        if r.reason == pb.Refusal.REPLAY and r.site_name in roster_sites))
