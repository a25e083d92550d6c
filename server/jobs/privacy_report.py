"""A job's privacy report (``privacy_report.json``, what ``privadapt result``
writes and the job's HTML page shows): each site's spend as its own ledger
stated it at the job's end, whatever the job's outcome. A job that failed or
was cancelled after its first round keeps one too (with no model): its
rounds were charged at every site that answered them.

Each site's entry holds the headline, the job's epsilon at the job's delta,
beside the site's lifetime total at its cap's delta
(common/privacy_figures.py), and the job's spend after each release at the
job's delta (server/jobs/spend_curve.py), recomputed from the mechanisms the
site reported by its own accounting method and adjacency.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence

from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.mechanisms import Adjacency
from privadapt.common.privacy_figures import job_spend_text, shared_delta, site_total_text
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.jobs.result_files import NAMES_NOT_STATED, ModelFeatures
from privadapt.server.jobs.spend_curve import spend_curve
from privadapt.server.store import CoordinatorStore, RoundRecord

logger = logging.getLogger(__name__)
# A report made without a finished model's features (tests, crashes, failures).
NO_FEATURES = ModelFeatures("", (), NAMES_NOT_STATED)
# Each site's adjacency and accounting method, as it registered them.
SiteAccounting = Mapping[str, tuple[Adjacency, AccountingMethod]]


def _site_entry(name: str, p: SitePrivacy, seen: list[RoundRecord],
                accounting: SiteAccounting) -> dict:
    adjacency, method = accounting.get(name, (Adjacency.REPLACE_ONE, p.job.method))
    return {
        "job_epsilon": p.job.epsilon, "delta": p.job.delta, "method": p.job.method.value,
        "total_epsilon": p.total.epsilon, "total_delta": p.total.delta,
        "cap_epsilon": p.cap_epsilon, "releases": len(p.mechanisms),
        "releases_seen_by_coordinator": sum(name in r.participants for r in seen),
        "spend_curve": spend_curve(p.mechanisms, p.job.delta, adjacency, method),
    }


def privacy_report_json(
    job_id: str, spec: pb.JobSpec, privacy: dict[str, SitePrivacy], rounds: list[RoundRecord],
    features: ModelFeatures = NO_FEATURES, accounting: SiteAccounting | None = None,
    outcome: str = "succeeded",
) -> str:
    """The report: each site's spend as its own ledger states it, every
    aborted round (already charged by the sites that answered it, and
    included in their figures), and how many rounds the coordinator saw each
    site's own answer in (``per_site`` rounds). ``outcome``: the job's end
    state (a failed or cancelled job's report comes without a model)."""
    aborted = [{"round": r.round, "step": r.step, "reason": r.abort_reason}
               for r in rounds if r.aborted]
    # The coordinator saw a site's own answer in a per-site round, and in a
    # secure sum with a single participant (after dropouts).
    seen = [r for r in rounds if r.form == "per_site" or len(r.participants) == 1]
    report = {
        "job_id": job_id,
        "algorithm": spec.algorithm,
        "outcome": outcome,
        "target": {"epsilon": spec.epsilon, "delta": spec.delta},
        "sites": {name: _site_entry(name, p, seen, accounting or {})
                  for name, p in sorted(privacy.items())},
        "sites_not_reporting": sorted(set(spec.sites) - set(privacy)),
        "rounds": len(rounds),
        "rounds_with_per_site_releases": [r.round for r in seen],
        "release_note": (
            f"in {len(seen)} round(s) the coordinator saw each participating site's own "
            "noised answer or selected index (per-site releases, or a sum over one site, "
            "each charged to that site's ledger); every other release was a secure sum "
            "over several sites" if seen
            else "every release was a secure sum: the coordinator saw only noisy sums "
            "over the participating sites"),
        "aborted_rounds": aborted,
        # What the model's weights mean: the schema digest the parties agreed
        # on, and its feature names (see JobManager.model_features).
        "schema_digest": features.schema_digest,
        "feature_names": list(features.names),
        "feature_names_source": features.source,
        "note": ("every aborted round was charged by the ledgers of the sites that answered "
                 "it before the abort; the epsilons above include those charges"
                 if aborted else "no round was aborted"),
    }
    return json.dumps(report, indent=2, allow_nan=True)


def report_delta(spec: pb.JobSpec) -> float | None:
    """The delta a job's spend is reported at: the job's (each site's cap
    delta for a noise-free job)."""
    return None if math.isinf(spec.epsilon) else spec.delta


def site_accounting(registry: SiteRegistry, sites: Sequence[str]) -> SiteAccounting:
    """Each registered site's adjacency and accounting method."""
    accounting = {}
    for name in sites:
        session = registry.session(name)
        budget = None if session is None else (session.budget or session.registration.budget)
        if budget is None or not budget.accounting:
            continue
        accounting[name] = (Adjacency(session.registration.adjacency or "replace_one"),
                            AccountingMethod(budget.accounting))
    return accounting


def cap_delta(registry: SiteRegistry, sites: Sequence[str]) -> float | None:
    """The cap delta ``sites`` share, as their ledgers reported it; None if
    they differ or one reported none."""
    sessions = [registry.session(name) for name in sites]
    if any(s is None or s.budget is None for s in sessions):
        return None
    return shared_delta(s.budget.delta_cap for s in sessions)


def log_spend(job_id: str, privacy: Mapping[str, SitePrivacy]) -> None:
    """The coordinator's log line per site at a job's end: the headline and
    the site's total, as ``privadapt result`` prints them."""
    for name, p in sorted(privacy.items()):
        logger.info("job=%s site=%s %s; %s", job_id, name,
                    job_spend_text(p.job.epsilon, p.job.delta),
                    site_total_text(p.total.epsilon, p.total.delta, p.cap_epsilon))


def keep_privacy_report(store: CoordinatorStore, registry: SiteRegistry, spec: pb.JobSpec,
                        federation: Federation, state: str) -> None:
    """A failed or cancelled job's spend as the sites' ledgers state it,
    stored without a model, when any round was started (else no site was
    charged for it)."""
    job_id = federation.job_id
    if not store.rounds(job_id, include_started=True):
        return
    try:
        privacy = federation.privacy_spent(report_delta(spec))
        store.save_result(job_id, {}, privacy_report_json(
            job_id, spec, privacy, store.rounds(job_id),
            accounting=site_accounting(registry, spec.sites), outcome=state))
        log_spend(job_id, privacy)
    except Exception:  # the job's end state is recorded whatever happens here
        logger.exception("job=%s: could not keep the privacy report of the %s job",
                         job_id, state)
