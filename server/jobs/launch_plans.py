"""The budget check of a launch, without holding the Launch call for long.

A job's privacy plan comes from running its estimator on stand-ins
(server/federation/planning.py), which costs what the estimator's public work
costs: nothing for noisy GD, a warm start on the whole public sample for the
adaptation estimators (tens of seconds on a busy machine). So a launch waits
for the plan at most ``wait_s``: a plan ready by then refuses the launch at
once (ConfigError, nothing stored); a later one is handed to the job, whose
thread waits for it before the first round, after its sites have connected
and before any key is published, and fails the job (its id stays free, no
site was charged) if the plan refuses it. The plan is made once either way.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable

from privadapt.common.proto import federation_pb2 as pb

#: How long a Launch call waits for the job's plan before the job waits instead.
PLAN_WAIT_S = 5.0


class LaunchPlans:
    """``check`` runs ``plan_and_refuse`` (raises ConfigError to refuse) for a
    spec; plans that outlast the launch are kept per job until it starts."""

    def __init__(self, plan_and_refuse: Callable[..., object],
                 wait_s: float | None = None) -> None:
        self._plan_and_refuse = plan_and_refuse
        self._wait_s = wait_s  # None: PLAN_WAIT_S, read at each launch
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="launch-plan")
        self._lock = threading.Lock()
        self._pending: dict[str, concurrent.futures.Future] = {}

    def check(self, spec: pb.JobSpec, *context: object) -> concurrent.futures.Future:
        """Raise what the plan (of ``spec`` and ``context``: the job's checked
        estimator) raises if it is ready within ``wait_s``; else the plan's
        future (done, or still running: for :meth:`adopt`)."""
        snapshot = pb.JobSpec()
        snapshot.CopyFrom(spec)  # the plan's own, whatever the caller does with spec
        future = self._executor.submit(self._plan_and_refuse, snapshot, *context)
        # A refusal ready in time is raised here; a slower plan goes on.
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(timeout=PLAN_WAIT_S if self._wait_s is None else self._wait_s)
        return future

    def adopt(self, job_id: str, future: concurrent.futures.Future | None) -> None:
        """Keep ``future``, if it is still running, for the job's first start."""
        if future is not None and not future.done():
            with self._lock:
                self._pending[job_id] = future

    def wait_before_first_round(self, job_id: str, cancelled: threading.Event) -> None:
        """Wait for the job's kept plan (if any; none on resume) and raise what
        it raises; returns early if ``cancelled`` is set."""
        with self._lock:
            future = self._pending.pop(job_id, None)
        while future is not None and not cancelled.is_set():
            try:
                future.result(timeout=0.2)
                return
            except concurrent.futures.TimeoutError:
                continue

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
