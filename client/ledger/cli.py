"""``privadapt ledger init``, ``show`` and ``clear-latch``: a site's privacy
ledger for its operator.

``init`` creates a site's ledger, once, on purpose: a site daemon never
creates one, so a ledger that was lost, emptied or replaced can never pass for
a new one. ``show`` reads the ledger read-only, with the cap
recorded in it (no policy file needed, and a running site daemon is not
disturbed): it first verifies the hash chain over every charge against the
head stored in the database and the head file beside it, then prints one line
per charge with the kernel that computed it ("unknown" for a charge from
before the ledger recorded kernels) and every field that determines its cost (the stored mechanism,
so a reader can recompute it: a Poisson-sampled Gaussian's sampling rate,
each block's sensitivity and multiplier), then the composed epsilon per job
and overall at the cap's delta, naming the accounting method. The running
figure each charge stored (the bound that admitted it, which can sit at the
cap while the exact total is below it) is not printed as a spend: the JSON
names it ``admission_bound``. ``--summary`` prints the cap and the totals only. It lists,
before the charges, every kernel the site latched off because its
floating-point certificate failed (client/ledger/latches.py), with when, and
the latches an operator cleared since.

``clear-latch`` is the operator's deliberate decision to enable such a kernel
again: the latch is stamped cleared (never deleted, so ``show`` still lists
it), and the site answers the kernel from its next query on. Whether a
certificate fails can depend on the private data, so each clear lets a
coordinator learn where the next failure falls, at most
log2(max_certificates + 1) more bits; clear only after investigating the
numerical libraries. Clearing also sets the kernel's count of certificates
back to 0, which is how a kernel that ran its policy's ``max_certificates``
is enabled again.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from privadapt.client.ledger.accounting import exact_report, mechanism_json, parse_mechanism
from privadapt.client.ledger.chain import head_file
from privadapt.client.ledger.latches import EXHAUSTED, KernelLatch
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.view import Charge
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import Adjacency, Mechanism

_EXIT_ERROR = 2


def describe_mechanism(mechanism: Mechanism, adjacency: Adjacency | None = None) -> str:
    """A short summary such as ``gaussian z=3.21 (2 blocks)`` or ``laplace eps=0.5``;
    the adjacency is named when it is not ``adjacency`` (the ledger's)."""
    text = mechanism.summary
    if adjacency is not None and mechanism.adjacency != adjacency:
        text += f" [{mechanism.adjacency.value}]"
    return text


def init_ledger(site_db: Path, policy_file: Path) -> int:
    """Create the ledger ``site_db`` (and its head file) for the site of
    ``policy_file``; refuse an existing one. Returns 0, or 2 after a one-line
    message on stderr."""
    try:
        if site_db.exists() and site_db.stat().st_size > 0:
            raise ConfigError(
                f"ledger {site_db} already exists; `privadapt ledger init` never overwrites or "
                "reopens a ledger (inspect it with `privadapt ledger show`)")
        policy = SitePolicy.from_toml(policy_file)
        PrivacyLedger(site_db, policy, create=True).close()
    except ConfigError as err:
        print(f"privadapt ledger init: {err}", file=sys.stderr)
        return _EXIT_ERROR
    print(f"created the privacy ledger of site {policy.site_name!r}: {site_db} "
          f"(and its head file {head_file(site_db)}; keep both, and back them up together)")
    return 0


def clear_latch(site_db: Path, kernel: str, out: TextIO | None = None) -> int:
    """Clear ``kernel``'s latch in the ledger ``site_db`` (verified first, as a
    site opens it); 0, or 2 after a one-line message on stderr (missing or
    altered ledger, or a kernel that is not latched)."""
    out = sys.stdout if out is None else out
    try:
        with PrivacyLedger.open_for_operator(site_db) as ledger:
            cleared = ledger.clear_latch(kernel)
    except ConfigError as err:
        print(f"privadapt ledger clear-latch: {err}", file=sys.stderr)
        return _EXIT_ERROR
    print(f"cleared the latch on kernel {kernel!r} (set {_when(cleared.latched_at)} by query "
          f"{cleared.query_id!r} of job {cleared.job_id!r}) in {site_db}: the site answers it "
          "again from its next query, and a coordinator can learn one more bit (whether its "
          "certificate fails again)", file=out)
    return 0


def latch_lines(latches: list[KernelLatch]) -> list[str]:
    """What ``ledger show`` prints about latched kernels (nothing if none was
    ever latched)."""
    if not latches:
        return []
    held = [each for each in latches if each.active]
    lines = ["latched kernels (refused since their floating-point certificate failed, a "
             "certificate was running when the site stopped, or they ran the policy's "
             "max_certificates, until an operator runs `privadapt ledger clear-latch`):"]
    lines += [f"  {each.kernel}  latched {_when(each.latched_at)} by query {each.query_id!r} "
              f"of job {each.job_id!r}{_interrupted(each)}" for each in held] or ["  none"]
    cleared = [each for each in latches if not each.active]
    if cleared:
        lines.append("cleared latches (each ended a run of certificates with a failure, "
                     "uncharged, or with the policy's last certificate):")
        lines += [f"  {each.kernel}  latched {_when(each.latched_at)}, cleared "
                  f"{_when(each.cleared_at or 0.0)}" for each in cleared]
    return lines


def _interrupted(latch: KernelLatch) -> str:
    if latch.outcome == EXHAUSTED:
        return " (it ran the policy's max_certificates; none failed)"
    return "" if latch.outcome == "failed" else (
        " (armed: its certificate was running -- or the site stopped during it)")


def _latch_document(latch: KernelLatch) -> dict[str, Any]:
    return {"kernel": latch.kernel, "latched_at": latch.latched_at, "job_id": latch.job_id,
            "query_id": latch.query_id, "cleared_at": latch.cleared_at,
            "outcome": latch.outcome}


def _epsilon(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(timestamp))


def _charge_table(charges: list[Charge], adjacency: Adjacency) -> list[str]:
    rows = [
        (
            _when(c.timestamp),
            c.job_id,
            c.query_id,
            c.kernel,
            describe_mechanism(c.mechanism, adjacency),
            mechanism_json(c.mechanism),  # every field its cost depends on
        )
        for c in charges
    ]
    header = ("time (UTC)", "job", "query", "kernel", "mechanism", "as stored")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]


@contextmanager
def verified_ledger(site_db: Path, command: str) -> Iterator[tuple[PrivacyLedger, str] | None]:
    """The ledger at ``site_db`` opened read-only with its verification line,
    or None after a one-line message naming ``command`` on stderr (missing,
    not a ledger, or altered): what ``ledger show`` and ``ledger report`` read."""
    try:
        ledger = PrivacyLedger.open_readonly(site_db)
    except ConfigError as err:
        print(f"privadapt {command}: {err}", file=sys.stderr)
        yield None
        return
    with ledger:
        try:
            verified = ledger.verify()
        except ConfigError as err:
            print(f"privadapt {command}: {err}", file=sys.stderr)
            yield None
            return
        yield ledger, verified


def show_ledger(site_db: Path, job: str | None = None, out: TextIO | None = None,
                as_json: bool = False, summary: bool = False) -> int:
    """Print the ledger at ``site_db`` (only ``job``'s charges if given) to ``out``
    (default: the current ``sys.stdout``, looked up at call time), as one JSON
    document if ``as_json`` (:func:`ledger_document`); with ``summary``, the
    cap and the totals only (no charge, no group of releases).

    Returns 0, or 2 after a one-line message on stderr when the file is missing,
    is not a ledger, or holds no charge for ``job``."""
    out = sys.stdout if out is None else out
    with verified_ledger(site_db, "ledger show") as opened:
        if opened is None:
            return _EXIT_ERROR
        ledger, verified = opened
        jobs = ledger.jobs()
        if job is not None and job not in jobs:
            known = ", ".join(jobs) if jobs else "none"
            print(
                f"privadapt ledger show: ledger {site_db} has no charges for job {job!r} "
                f"(jobs charged: {known})",
                file=sys.stderr,
            )
            return _EXIT_ERROR
        if as_json:
            document = ledger_document(ledger, site_db, jobs if job is None else [job], job)
            if summary:
                document = {k: v for k, v in document.items() if k != "charges"}
            print(json.dumps({**document, "verified": verified}, indent=2), file=out)
            return 0
        _print_ledger(ledger, site_db, jobs if job is None else [job], job, out, summary)
        print(verified, file=out)
    return 0


def ledger_document(ledger: PrivacyLedger, site_db: Path, jobs: list[str],
                    job: str | None) -> dict[str, Any]:
    """What ``ledger show`` prints, for scripts: the cap, every charge with
    its stored mechanism (every field its cost depends on) and running
    epsilon, the kernels latched off (and the latches cleared), the composed
    epsilon per job and over all jobs."""
    policy = ledger.policy
    charges = ledger.charges(job)
    total = ledger.spent()
    return {
        "site": policy.site_name, "database": str(site_db),
        "cap": {"epsilon": policy.epsilon_cap, "delta": policy.delta_cap,
                "adjacency": policy.adjacency.value, "accounting": policy.accounting.value},
        "charges": [{"time": c.timestamp, "job_id": c.job_id, "query_id": c.query_id,
                     "kernel": c.kernel,
                     "summary": describe_mechanism(c.mechanism, policy.adjacency),
                     "mechanism": json.loads(mechanism_json(c.mechanism)),
                     # The bound the charge was admitted under, not the spend.
                     "admission_bound": c.epsilon_after, "method": c.method.value}
                    for c in charges],
        "latched_kernels": [_latch_document(each) for each in ledger.latches() if each.active],
        "cleared_latches": [_latch_document(each) for each in ledger.latches()
                            if not each.active],
        "jobs": {name: {"charges": sum(c.job_id == name for c in charges),
                        "epsilon": (report := ledger.spent_by_job(name)).epsilon,
                        "delta": report.delta, "method": report.method.value}
                 for name in jobs},
        "total": {"charges": len(ledger.charges()), "epsilon": total.epsilon,
                  "delta": total.delta, "method": total.method.value},
    }


def _print_ledger(
    ledger: PrivacyLedger, site_db: Path, jobs: list[str], job: str | None, out: TextIO,
    summary: bool = False,
) -> None:
    policy = ledger.policy
    print(f"privacy ledger of site {policy.site_name!r} ({site_db})", file=out)
    print(
        f"cap: epsilon={_epsilon(policy.epsilon_cap)} at delta={policy.delta_cap:g}, "
        f"{policy.adjacency.value} adjacency, accounted by {policy.accounting.value.upper()}",
        file=out,
    )
    latched = latch_lines(ledger.latches())
    if latched:
        print(file=out)
    for line in latched:
        print(line, file=out)
    charges = ledger.charges(job)
    print(file=out)
    if not charges:
        print("no charges yet", file=out)
        return
    if not summary:
        for line in _charge_table(charges, policy.adjacency):
            print(line, file=out)
        print(file=out)
    print(f"totals (composed epsilon at delta={policy.delta_cap:g}, the cap's):", file=out)
    counts = {name: 0 for name in jobs}
    for charge in charges:
        counts[charge.job_id] += 1
    width = max(len(name) for name in [*jobs, "all jobs"])
    for name in jobs:
        report = ledger.spent_by_job(name)
        print(
            f"  job {name.ljust(width)}  {counts[name]:>5} charges  "
            f"epsilon={_epsilon(report.epsilon)} ({report.method.value.upper()})",
            file=out,
        )
    total = ledger.spent()
    used = ""
    if math.isfinite(policy.epsilon_cap) and policy.epsilon_cap > 0:
        used = f", {100 * total.epsilon / policy.epsilon_cap:.0f}% of the cap"
    everything = len(ledger.charges()) if job is not None else len(charges)
    print(
        f"  site {'all jobs'.ljust(width)} {everything:>5} charges  "
        f"epsilon={_epsilon(total.epsilon)} ({total.method.value.upper()}){used}",
        file=out,
    )
    if not summary:
        _print_groups(ledger, charges, out)


def _print_groups(ledger: PrivacyLedger, charges: list[Charge], out: TextIO) -> None:
    """Each distinct mechanism with its number of releases (steps) and their
    epsilon alone: composing every group (count x mechanism) by the named
    accountant gives the totals above, so they can be recomputed from this."""
    policy = ledger.policy
    groups = Counter(mechanism_json(c.mechanism) for c in charges)
    print(file=out)
    print(f"releases composed into these totals ({policy.adjacency.value} adjacency, "
          f"{policy.accounting.value.upper()} at delta={policy.delta_cap:g}), one line per "
          "distinct mechanism:", file=out)
    for text, count in groups.items():
        alone = exact_report({text: count}, policy)
        summary = describe_mechanism(parse_mechanism(text), policy.adjacency)
        print(f"  {count:>5} x {summary}: epsilon={_epsilon(alone.epsilon)} alone  {text}",
              file=out)
