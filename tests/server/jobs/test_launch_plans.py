"""A launch waits for its job's plan only briefly; a later plan is waited for
by the job before its first round (server/jobs/launch_plans.py)."""

import threading

import pytest

from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.launch_plans import LaunchPlans


def refusing_after(event: threading.Event):
    def plan(spec: pb.JobSpec):
        event.wait(10)
        raise ConfigError(f"job: over budget ({spec.algorithm})")
    return plan


def test_a_quick_refusal_is_raised_by_the_launch_itself():
    ready = threading.Event()
    ready.set()
    plans = LaunchPlans(refusing_after(ready), wait_s=5.0)
    with pytest.raises(ConfigError, match="over budget"):
        plans.check(pb.JobSpec(algorithm="noisy_gd"))
    plans.close()


def test_a_slow_plan_is_kept_for_the_jobs_first_round_only():
    release = threading.Event()
    plans = LaunchPlans(refusing_after(release), wait_s=0.0)
    pending = plans.check(pb.JobSpec(algorithm="noisy_gd"))
    assert pending is not None
    plans.adopt("job-1", pending)
    release.set()
    with pytest.raises(ConfigError, match=r"over budget \(noisy_gd\)"):
        plans.wait_before_first_round("job-1", threading.Event())
    plans.wait_before_first_round("job-1", threading.Event())  # once: a resume has none
    plans.close()


def test_a_cancelled_job_does_not_wait_for_its_plan():
    never = threading.Event()
    plans = LaunchPlans(refusing_after(never), wait_s=0.0)
    plans.adopt("job-1", plans.check(pb.JobSpec(algorithm="noisy_gd")))
    cancelled = threading.Event()
    cancelled.set()
    plans.wait_before_first_round("job-1", cancelled)
    never.set()
    plans.close()
