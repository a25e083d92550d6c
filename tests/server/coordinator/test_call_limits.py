"""Per-caller budgets and the server-wide slots with their reserve
(server/coordinator/call_limits.py; the network attack is
tests/system/test_network_call_flood.py)."""

from __future__ import annotations

import pytest

from privadapt.server.coordinator.call_limits import CallLimits, method_group

LIMITS = {"round": 3, "session": 1, "other": 1}


def test_a_caller_over_its_budget_is_refused_naming_the_limit_and_others_are_not():
    limits = CallLimits(capacity=10, reserve=2, per_caller=LIMITS)
    held = [limits.admit("mallory", "round") for _ in range(3)]
    refusal = limits.admit("mallory", "round")
    assert refusal == ("'mallory' already has 3 round calls open, the most one caller may: "
                       "wait for them to finish")
    assert not isinstance(limits.admit("mallory", "session"), str)  # its own budget per group
    assert not isinstance(limits.admit("site-a", "round"), str)
    limits.release(held[0])
    assert not isinstance(limits.admit("mallory", "round"), str)
    assert limits.open_calls("mallory") == 4


def test_the_reserve_is_kept_for_privileged_callers():
    limits = CallLimits(capacity=4, reserve=2, per_caller=LIMITS)
    calls = [limits.admit(f"holder-{k}", "round") for k in range(4)]
    assert limits.take_slot(calls[0], privileged=False) is None
    assert limits.take_slot(calls[1], privileged=False) is None
    refusal = limits.take_slot(calls[2], privileged=False)
    assert "the last 2 of its 4 slots are kept for operators and registered sites" in refusal
    assert limits.take_slot(calls[2], privileged=True) is None
    assert limits.take_slot(calls[3], privileged=True) is None
    assert "that is all it can" in limits.take_slot(limits.admit("operator", "operator"), True)
    for call in calls:
        limits.release(call)
    assert limits.busy_slots() == 0 and limits.open_calls("holder-0") == 0


def test_a_registered_site_flooding_slow_calls_leaves_the_reserve_to_the_others():
    # A privileged caller (a registered site's own certificate) whose whole
    # calls are slow: it holds at most the slots open to all, and operators and
    # the job's other sites are served from the reserve while it holds them.
    limits = CallLimits(capacity=6, reserve=2, per_caller={"round": 32, "other": 1,
                                                           "operator": 4})
    flood = [limits.admit("site-mallory", "round") for _ in range(32)]
    taken = [limits.take_slot(call, privileged=True) for call in flood]
    assert taken[:4] == [None] * 4
    assert all("'site-mallory' already holds 4 of the coordinator's 6 call slots" in refusal
               for refusal in taken[4:])
    assert limits.take_slot(limits.admit("operator", "operator"), privileged=True) is None
    assert limits.take_slot(limits.admit("site-b", "round"), privileged=True) is None
    assert "that is all it can" in limits.take_slot(limits.admit("site-c", "round"), True)
    limits.release(flood[0])
    assert limits.take_slot(flood[4], privileged=True) is None  # its slot back, one more


def test_an_unnamed_caller_has_only_the_server_wide_slots():
    limits = CallLimits(capacity=3, reserve=1, per_caller=LIMITS)
    calls = [limits.admit(None, "session") for _ in range(5)]  # no per-caller budget
    assert not any(isinstance(call, str) for call in calls)
    assert [limits.take_slot(call, privileged=False) is None for call in calls[:3]] == \
        [True, True, False]


def test_methods_fall_in_their_groups():
    assert method_group("/privadapt.v1.FederationService/SubmitShare") == "round"
    assert method_group("/privadapt.v1.FederationService/Connect") == "stream"
    assert method_group("/privadapt.v1.OperatorService/Watch") == "watch"
    assert method_group("/no.Such/Method") == "other"


def test_a_reserve_as_large_as_the_capacity_is_refused():
    with pytest.raises(ValueError, match="reserve < capacity"):
        CallLimits(capacity=2, reserve=2)
