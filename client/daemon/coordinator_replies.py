"""Every field a coordinator sends a site, checked against sane ranges before
the site acts on it.

A coordinator certificate is enough to send any bytes a field can hold; a reply
with ``heartbeat_interval`` 1e14 s once crashed the site daemon (``OverflowError``
out of ``Duration.ToTimedelta``) and 1e12 s silently killed its heartbeat thread
(``Event.wait`` refuses such a timeout). Each check here
raises :class:`~privadapt.common.errors.WireError`, which the daemon logs before
backing off and reconnecting (a bad Register reply) and the worker refuses (a
bad work item); neither ends the daemon.

The query inside a ``RoundAnnouncement`` is validated where it is decoded
(``common/wire.query_from_proto``); here are the envelope fields around it.
"""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration

from privadapt.common.errors import WireError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.fields import check_name, check_round

#: Heartbeat periods a site accepts (seconds); 0 (unset) means the default.
MIN_HEARTBEAT_S, MAX_HEARTBEAT_S, DEFAULT_HEARTBEAT_S = 0.5, 3600.0, 10.0


def heartbeat_interval(duration: Duration, field: str = "heartbeat_interval") -> float:
    """Seconds between heartbeats, from a coordinator's Duration: the default
    when unset, else within [MIN_HEARTBEAT_S, MAX_HEARTBEAT_S]. Read from the
    raw fields, never through ``ToTimedelta`` (which overflows)."""
    if duration.seconds == 0 and duration.nanos == 0:
        return DEFAULT_HEARTBEAT_S
    seconds = duration.seconds + duration.nanos * 1e-9
    if not MIN_HEARTBEAT_S <= seconds <= MAX_HEARTBEAT_S:
        raise WireError(
            f"{field} of {seconds:g} s is outside [{MIN_HEARTBEAT_S:g}, {MAX_HEARTBEAT_S:g}] s"
        )
    return seconds


def check_register_response(reply: pb.RegisterResponse) -> float:
    """Validate a Register reply; the heartbeat interval it sets, in seconds."""
    check_name(reply.session_id, "session_id")
    check_name(reply.coordinator_name, "coordinator_name", required=False)
    return heartbeat_interval(reply.heartbeat_interval)


def check_work_item(item: pb.WorkItem) -> None:
    """Validate a work item's envelope (ids, round numbers, delta)."""
    kind = item.WhichOneof("item")
    if kind is None:
        return  # an item kind this site does not know: ignored by the worker
    message = getattr(item, kind)
    check_name(message.job_id, f"{kind}.job_id")
    if kind in ("round_announcement", "roster", "round_abort"):
        check_round(message.round, f"{kind}.round")
        check_name(message.query_id, f"{kind}.query_id")
    if kind == "privacy_report_request" and not 0 <= message.delta < 1:
        raise WireError(f"privacy_report_request.delta {message.delta!r} is outside [0, 1)")
