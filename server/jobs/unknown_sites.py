"""A job naming a site no one knows is refused as unknown, not as another
site's policy violation.

A site named in a job may still be starting, so a launch does not refuse a
name only because it has not registered yet: the job waits for it
(``site_wait_timeout``) and then fails naming the sites that never came. But
when a registered site's ``peers`` list leaves the name out, the launch would
be refused anyway, and the true reason is most likely a name no site has
ever registered under (a typo): that is what the refusal says.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb


def refuse_unknown_sites(named: Collection[str], registered: Collection[str],
                         registrations: Mapping[str, pb.RegisterRequest]) -> None:
    """ConfigError naming each site of ``named`` that never registered
    (``registered``: every site the coordinator's store knows) when a
    registered site's peers list (``registrations``) leaves it out."""
    unknown = sorted(set(named) - set(registered))
    refused_by = sorted(
        name for name, registration in registrations.items()
        if registration.HasField("terms") and registration.terms.peers_listed
        and set(unknown) - set(registration.terms.peers))
    if not unknown or not refused_by:
        return
    known = sorted(registered)
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        described.append(repr(name) + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ConfigError(
        f"job: unknown site(s) {', '.join(described)}: no site of that name has ever registered "
        f"with this coordinator (registered: {', '.join(known) or 'none'}); check [job] sites, "
        "or start that site's daemon first")
