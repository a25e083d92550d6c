"""``privadapt ledger report``: a site's privacy ledger as one self-contained
HTML page, for an auditor.

Generated from the ledger alone (opened read-only, its hash chain verified
first, as ``ledger show`` does): every job that touched the site's data, each
release with every field that sets its cost, cumulative epsilon over time
against the cap as an inline SVG figure, and what remains. The page needs no
network: no script, no stylesheet, font or image from elsewhere, no link
out. Every text that came from outside the site (job and query ids, chosen by
a coordinator) is HTML-escaped, so a hostile id cannot inject markup into the
auditor's browser.

Each number is printed rounded and carried exactly in a ``data-value``
attribute (Python's ``repr`` of the float), so a program can check the page
against the ledger. Each release names the kernel that computed it, as the
ledger recorded it ("unknown" for a charge from before the ledger recorded
kernels, schema 3). A section lists every kernel the site latched off after
its floating-point certificate failed (client/ledger/latches.py), active or
cleared by an operator, each one bit released uncharged.

The cumulative figure is the site's exact total at its cap's delta after
every job's last charge and after evenly spaced charges
(client/ledger/running_total.py), never the upper bound a charge was admitted
under (which can sit at the cap while the total is below it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privadapt.client.ledger.accounting import exact_report, mechanism_json
from privadapt.client.ledger.cli import verified_ledger
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.running_total import chosen_charges, exact_totals
from privadapt.client.ledger.view import Charge
from privadapt.client.policy import SitePolicy
from privadapt.common.html_page import StepPlot, render, step_plot, when
from privadapt.common.mechanisms import KernelMechanism, Mechanism

_EXIT_ERROR = 2
def write_report(site_db: Path, out: Path) -> int:
    """Write the report of the ledger ``site_db`` to ``out``; 0, or 2 after a
    one-line message on stderr (missing or altered ledger)."""
    with verified_ledger(site_db, "ledger report") as opened:
        if opened is None:
            return _EXIT_ERROR
        ledger, verified = opened
        page = render_report(ledger, verified, site_db)
        count = len(ledger.charges())
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} (privacy report of site {ledger.policy.site_name!r}, {count} charges)")
    return 0


def render_report(ledger: PrivacyLedger, verified: str, site_db: Path) -> str:
    """The whole page as a string."""
    policy = ledger.policy
    charges = ledger.charges()
    total = ledger.spent()
    remaining = (max(0.0, policy.epsilon_cap - total.epsilon) if math.isfinite(total.epsilon)
                 else 0.0)
    totals = exact_totals(charges, policy, chosen_charges(charges))
    return render(__package__, "ledger_report.html.j2", policy=policy, total=total,
                  remaining=remaining, generated=time.time(), site_db=str(site_db),
                  verified=verified, plot=_plot(charges, totals, policy.epsilon_cap),
                  latches=ledger.latches(), jobs=_jobs(ledger, charges, totals),
                  releases=[_release(charge, policy) for charge in charges])


def _jobs(ledger: PrivacyLedger, charges: Sequence[Charge],
          totals: dict[int, float]) -> list[dict[str, Any]]:
    """Per job: its id, how many releases, the first and last, its epsilon,
    and the site's total after its last release (None when not computed)."""
    last = {charge.job_id: index for index, charge in enumerate(charges)}
    jobs = []
    for job in ledger.jobs():
        mine = [c for c in charges if c.job_id == job]
        jobs.append({"id": job, "releases": len(mine), "first": mine[0].timestamp,
                     "last": mine[-1].timestamp, "epsilon": ledger.spent_by_job(job).epsilon,
                     "total_after": totals.get(last[job])})
    return jobs


def _release(charge: Charge, policy: SitePolicy) -> dict[str, Any]:
    """A charge with its cost alone, its sensitivity and noise as text, and
    its mechanism as stored."""
    stored = mechanism_json(charge.mechanism)
    sensitivity, noise = _sensitivity_and_noise(charge.mechanism)
    return {"charge": charge, "alone": exact_report({stored: 1}, policy).epsilon,
            "sensitivity": sensitivity, "noise": noise, "stored": stored}


def _sensitivity_and_noise(mechanism: Mechanism) -> tuple[str, str]:
    """Per block: the sensitivity, and the noise (sigma or scale; a sampling
    rate when there is one); for other kinds, their own fields."""
    if isinstance(mechanism, KernelMechanism):
        sensitivity = ", ".join(f"{s:.6g}" for s in mechanism.sensitivities)
        noise = ", ".join(f"{s:.6g}" for s in mechanism.noise_scales)
        if mechanism.is_sampled:
            noise += f" (Poisson sampling rate {mechanism.sampling_rate:.6g})"
        return f"{sensitivity} ({mechanism.noise_norm})", noise
    fields = {k: v for k, v in mechanism.to_dict().items() if k not in ("kind", "adjacency")}
    sensitivity = fields.pop("sensitivity", fields.pop("sensitivities", "-"))
    return str(sensitivity), ", ".join(f"{k}={v}" for k, v in fields.items()) or "-"


def _plot(charges: Sequence[Charge], totals: dict[int, float], cap: float
          ) -> StepPlot | None:
    """The site's exact total against time as a step line (None without charges)."""
    if not charges:
        return None
    times = [charges[index].timestamp for index in totals]
    end = max(times[-1], times[0] + 1e-9)
    return step_plot(times, list(totals.values()), cap, (when(times[0]), when(end)),
                     "the site's total epsilon at the cap's delta over time against the cap")
