"""How many calls each caller may have open on the coordinator, per method group.

Before these limits, any certificate from the CA could open a few hundred
half-sent calls and take every slot of grpc's synchronous server before a
role check ran. Now a call counts against its caller's
own small budget per method group (the caller is the certificate's name)
from its first bytes, so a flood of half-sent calls fills only the flooder's
budget; and it takes one of the server-wide slots (one per pool thread) only
once its request has arrived, with a reserve of slots that only privileged
callers (operators, and registered sites, who take part in jobs) may take, so
that many certificate holders together cannot starve them either. One named
caller never holds more slots than are open to all (capacity - reserve), so a
registered site's own certificate, privileged as it is, cannot flood the
reserve with slow whole calls: the reserve stays for operators and the other
sites of a job (two registered sites together still could). Refusals name
the limit that was hit, to the caller that hit it.

Counting happens on the server's event loop; a lock keeps it safe anyway.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

_FEDERATION = "/privadapt.v1.FederationService/"
_OPERATOR = "/privadapt.v1.OperatorService/"
_HEALTH = "/grpc.health.v1.Health/"

#: The group of each method; a method not listed is in group ``other``.
METHOD_GROUPS: Mapping[str, str] = {
    **{_FEDERATION + m: "session" for m in ("Register", "Heartbeat")},
    _FEDERATION + "Connect": "stream",
    **{_FEDERATION + m: "round" for m in ("PublishKey", "SubmitShare", "Refuse",
                                          "ReportPrivacy")},
    **{_OPERATOR + m: "operator" for m in ("Launch", "Status", "Cancel", "Result",
                                           "ListSites")},
    _OPERATOR + "Watch": "watch",
    **{_HEALTH + m: "health" for m in ("Check", "Watch", "List")},
}

#: Calls one caller may have open at once, per group. A site holds one
#: Connect stream (two while a reconnect replaces the old one), a key or share
#: per concurrent job, a heartbeat; an operator a few commands and watches.
PER_CALLER_LIMITS: Mapping[str, int] = {
    "session": 4, "stream": 2, "round": 32, "operator": 16, "watch": 8, "health": 4,
    "other": 2,
}


def method_group(method: str) -> str:
    return METHOD_GROUPS.get(method, "other")


@dataclass
class Admission:
    """One admitted call; give it back with :meth:`CallLimits.release`."""

    caller: str | None
    group: str
    slot: bool = False  # holds one of the server-wide slots


class CallLimits:
    """Calls open per (caller, group), counted from the call's first bytes;
    and server-wide slots, one per pool thread, taken once a call's request
    has arrived (a call still waiting for its request needs no thread), of
    which the last ``reserve`` only privileged callers may take."""

    def __init__(self, capacity: int, reserve: int,
                 per_caller: Mapping[str, int] = PER_CALLER_LIMITS) -> None:
        if not 0 <= reserve < capacity:
            raise ValueError(f"need 0 <= reserve < capacity, got {reserve}, {capacity}")
        self.capacity = capacity
        self.reserve = reserve
        self.per_caller = dict(per_caller)
        self._lock = threading.Lock()
        self._open: Counter[tuple[str, str]] = Counter()
        self._slots = 0
        self._caller_slots: Counter[str] = Counter()

    def admit(self, caller: str | None, group: str) -> Admission | str:
        """An :class:`Admission`, or the refusal naming the caller's limit. A
        caller of ``None`` (nobody is named, under ``--insecure``) has only
        the server-wide slots."""
        limit = self.per_caller.get(group, self.per_caller["other"])
        with self._lock:
            if caller is not None:
                if self._open[caller, group] >= limit:
                    return (f"{caller!r} already has {limit} {group} calls open, the most "
                            "one caller may: wait for them to finish")
                self._open[caller, group] += 1
        return Admission(caller, group)

    def take_slot(self, admission: Admission, privileged: bool) -> str | None:
        """Give the admitted call a server-wide slot; None, or the refusal."""
        share = self.capacity - self.reserve
        caller = admission.caller
        with self._lock:
            if self._slots >= (self.capacity if privileged else share):
                return (f"the coordinator is serving {self._slots} calls; "
                        + ("that is all it can" if privileged else
                           f"the last {self.reserve} of its {self.capacity} slots are kept "
                           "for operators and registered sites")
                        + ": retry shortly")
            if caller is not None and self._caller_slots[caller] >= share:
                return (f"{caller!r} already holds {share} of the coordinator's "
                        f"{self.capacity} call slots, the most one caller may: wait for its "
                        "calls to finish")
            self._slots += 1
            if caller is not None:
                self._caller_slots[caller] += 1
            admission.slot = True
        return None

    def release(self, admission: Admission) -> None:
        """The call is over: give back its place in the caller's budget and its slot."""
        with self._lock:
            key = (admission.caller, admission.group)
            if admission.caller is not None:
                self._open[key] -= 1
                if self._open[key] <= 0:
                    del self._open[key]
            if admission.slot:
                self._slots -= 1
                admission.slot = False
                if admission.caller is not None:
                    self._caller_slots[admission.caller] -= 1
                    if self._caller_slots[admission.caller] <= 0:
                        del self._caller_slots[admission.caller]

    def open_calls(self, caller: str) -> int:
        """Calls ``caller`` has open now."""
        with self._lock:
            return sum(n for (name, _), n in self._open.items() if name == caller)

    def busy_slots(self) -> int:
        with self._lock:
            return self._slots
