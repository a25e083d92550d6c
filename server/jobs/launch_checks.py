"""Checks of a job against its sites, made before anything is spent.

A job is refused at launch, when the operator can still fix it, and
again at its start (once its sites have connected, before any key is
published), never as an internal error after rounds were charged:

* its delta must be below 1/n of the smallest participating site whose n is
  public (replace-one sites declare n at registration; add/remove sites
  declare 0, their n being private);
* every participating site and the coordinator's public sample must agree on
  what the features mean (common/data/schema_digest.py): the refusal names the
  disagreeing sites and the first field each differs in;
* no site's registered policy terms may be certain to refuse every round
  (a ``peers`` list leaving out another of the job's sites, a
  ``min_participants`` above the job's number of sites, a
  ``collusion_tolerance`` above the job's), and every kernel
  the job's plan queries must be allowed by each site's policy, and no
  planned query may exceed a site's registered ``max_query_work`` (by the
  kernel's public work estimate, at the site's public n): the refusal names
  the site;
* no planned release may add noise too coarse for the job's fixed-point
  grid (a site refuses it at its round, after every earlier round was
  charged): the refusal names the release;
* the estimator must accept its hyperparameters together (the checks its
  ``fit`` would make before the first round) and have the public sample it
  needs;
* the job must fit in what every registered site reports it has left: its
  releases (its own algorithm, run on stand-ins: server/federation/planning.py)
  are previewed at each site's cap delta (server/jobs/privacy_plan.py), and a job
  that would exceed a site's remaining budget is refused, naming the site.

Each check raises ``ConfigError`` with a message an operator can act on.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.schema_digest import SchemaDigest, describe_names
from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.base import InvalidParameterError, PrivateEstimator
from privadapt.server.coordinator.site_registry import SiteSession
from privadapt.server.federation.noise_grid import releases_over_grid
from privadapt.server.federation.planning import JOB_GRID, PlannedRelease
from privadapt.server.jobs.catalog import checked_at_launch, estimator_for
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.privacy_plan import SiteBudgetPreview, plan_lines, previews_for
from privadapt.server.store import SiteRecord

logger = logging.getLogger(__name__)

#: The reference a site is compared with when there is no public sample.
PUBLIC_SAMPLE = "the coordinator's public sample"


def check_delta_against_sizes(spec: pb.JobSpec, sizes: Mapping[str, int]) -> None:
    """Refuse a delta of at least 1/n for the smallest participating site
    whose record count n is public (``sizes``: 0 where it is private)."""
    public = {name: n for name, n in sizes.items() if n > 0}
    if not public:
        return
    name = min(public, key=lambda site: (public[site], site))
    n = public[name]
    if spec.delta >= 1.0 / n:
        raise ConfigError(
            f"job: delta = {spec.delta:g} is not below 1/n = {1.0 / n:.3g} of site {name!r} "
            f"(n = {n} records, the smallest participating site whose size is public), so "
            f"it protects no one there; write [job] delta below {1.0 / n:.3g}, such as 1e-6")


def check_schema_agreement(public: SchemaDigest | None,
                           sites: Mapping[str, SchemaDigest | None]) -> SchemaDigest | None:
    """Refuse unless every site (and the public sample, if any) agree on the
    meaning of the features. The reference is the public sample, else the
    digest most sites hold (ties: the first site by name holding one); it is
    returned (None when there is nothing to compare)."""
    missing = sorted(name for name, digest in sites.items() if digest is None)
    if missing:
        raise ConfigError(
            f"job: site(s) {', '.join(repr(n) for n in missing)} registered no schema digest "
            "(privadapt-site older than this coordinator), so nobody can tell whether their "
            "features mean what the other sites' do; upgrade them")
    digests = {name: d for name, d in sorted(sites.items()) if d is not None}
    if public is not None:
        reference_name, reference = PUBLIC_SAMPLE, public
    elif digests:
        counts = Counter(d.digest for d in digests.values())
        reference_name = max(digests, key=lambda n: (counts[digests[n].digest],
                                                     -sorted(digests).index(n)))
        reference, reference_name = digests[reference_name], f"site {reference_name!r}"
    else:
        return None
    problems = []
    for name, digest in digests.items():
        differing = reference.differing_fields(digest)
        if differing:
            plain = "" if digest.from_schema else " (plain arrays, no schema file)"
            problems.append(f"site {name!r}{plain} differs in {describe_names(differing)}")
    if problems:
        raise ConfigError(
            f"job: the sites do not agree on what the data means; compared with "
            f"{reference_name}: {'; '.join(problems)}. Give every site (and the coordinator's "
            "public_source_schema) the same schema TOML")
    return reference


def check_site_policies(spec: pb.JobSpec, registrations: Mapping[str, pb.RegisterRequest]
                        ) -> None:
    """Refuse a job one of its registered sites would refuse every round of,
    under the policy terms it registered (none: not checked): a ``peers``
    list that leaves out another of the job's sites (its roster check
    refuses any round with that site), a ``min_participants`` above the
    job's number of sites, or a ``collusion_tolerance`` above the job's (it
    refuses every secure sum of such a job: client/query_admission.py).
    Checked before any key is published, so no site is charged for rounds
    another site's policy was certain to abort."""
    problems = []
    for name, registration in sorted(registrations.items()):
        if not registration.HasField("terms"):
            continue
        terms = registration.terms
        strangers = sorted(set(spec.sites) - set(terms.peers) - {name})
        if terms.peers_listed and strangers:
            problems.append(
                f"site {name!r} masks only with its peers ({', '.join(terms.peers) or 'none'}) "
                f"and would refuse every round with {', '.join(repr(s) for s in strangers)}: "
                f"leave them out of [job] sites, or ask site {name!r} to add them to "
                "[federation] peers in its policy")
        if terms.min_participants > len(spec.sites):
            problems.append(
                f"site {name!r} answers only rounds of at least {terms.min_participants} sites "
                f"(its policy's min_participants) and the job names {len(spec.sites)}")
        if spec.collusion_tolerance < terms.collusion_tolerance:
            problems.append(
                f"site {name!r} answers only secure sums that tolerate at least "
                f"{terms.collusion_tolerance} colluding site(s) (its policy's "
                f"collusion_tolerance) and the job's collusion_tolerance is "
                f"{spec.collusion_tolerance}: set [job] collusion_tolerance = "
                f"{terms.collusion_tolerance} or more (--set collusion_tolerance="
                f"{terms.collusion_tolerance}), or leave site {name!r} out of [job] sites")
    if problems:
        raise ConfigError(f"job: {'; '.join(problems)}")


def check_kernels_allowed(releases: Sequence[PlannedRelease],
                          sessions: Sequence[SiteSession]) -> None:
    """Refuse a job whose privacy plan queries a kernel that one of its sites'
    policies does not allow (a site registers its allowed kernels; none
    listed: any), naming the site and the kernels it allows."""
    planned = sorted({release.kernel for release in releases})
    problems = []
    for session in sorted(sessions, key=lambda s: s.name):
        allowed = set(session.registration.kernels)
        missing = [k for k in planned if allowed and k not in allowed]
        if missing:
            problems.append(f"site {session.name!r} allows only {sorted(allowed)}, and the job "
                            f"queries {missing}")
    if problems:
        raise ConfigError(f"job: {'; '.join(problems)}: its policy would refuse those rounds "
                          "(ask the site to add the kernel to [queries] allowed_kernels)")


def check_noise_grid(releases: Sequence[PlannedRelease], codec: FixedPointCodec,
                     dim: int) -> None:
    """Refuse a job one of whose planned releases adds noise too coarse for
    the fixed-point grid of ``codec`` (server/federation/noise_grid.py), naming
    the first such release: every site would refuse that round, after
    charging the rounds before it."""
    excess = releases_over_grid(releases, codec.fractional_bits, dim)
    if excess:
        more = f" (and {len(excess) - 1} later release(s))" if len(excess) > 1 else ""
        raise ConfigError(
            f"job: {excess[0].describe()}{more}, so every site would refuse that round "
            "after charging the ones before it: a larger epsilon, fewer iterations or "
            "smaller clipping bounds would fit")


def check_query_work(releases: Sequence[PlannedRelease], sessions: Sequence[SiteSession],
                     dim: int) -> None:
    """Refuse a job whose plan asks a site for a query its registered
    ``max_query_work`` refuses (client/query_admission.py): the same public
    estimate, ``Kernel.work``, at the site's public n. A site under
    add/remove keeps n private (it registers 0), so only the site itself can
    check it; it still does, at the round, before reading a record."""
    problems = []
    for session, cap, records in _capped_sites(sessions, "max_query_work"):
        worst, kernel_name = 0.0, ""
        for name, work in _planned_work(releases, session.name, dim, records):
            if work > worst:
                worst, kernel_name = work, name
        if worst > cap:
            problems.append(f"site {session.name!r} answers only queries of at most {cap:.3g} "
                            f"multiply-adds (its policy's max_query_work), and the job's "
                            f"{kernel_name} queries need about {worst:.3g} there")
    if problems:
        raise ConfigError(f"job: {'; '.join(problems)}: fewer iterations or a smaller query "
                          "would fit, or ask the site to raise [queries] max_query_work")


def check_job_work(releases: Sequence[PlannedRelease], sessions: Sequence[SiteSession],
                   dim: int) -> None:
    """Refuse a job whose planned queries would together cost a site more
    than its registered ``max_job_work`` (client/compute_budget.py): the sum of
    the same public estimates, ``Kernel.work``, over the releases the site
    takes part in, at its public n. Where the coordinator cannot know the
    figure (a site under add/remove keeps n private and registers 0; a site
    older than the term registers no cap) the site still refuses the query
    that would take the job over, before reading a record, in words that
    name the cap."""
    problems = []
    for session, cap, records in _capped_sites(sessions, "max_job_work"):
        total, answered = 0.0, 0
        for _, work in _planned_work(releases, session.name, dim, records):
            total, answered = total + work, answered + 1
            if total > cap:
                problems.append(f"site {session.name!r} spends at most {cap:.3g} multiply-adds "
                                f"on one job (its policy's max_job_work), and the job's first "
                                f"{answered} planned queries already need {total:.3g} there")
                break
    if problems:
        raise ConfigError(f"job: {'; '.join(problems)}: fewer rounds or smaller queries would "
                          "fit, or ask the site to raise [queries] max_job_work")


def _capped_sites(sessions: Sequence[SiteSession], term: str
                  ) -> Iterator[tuple[SiteSession, float, int]]:
    """(session, cap, public n) of each site, by name, that registered the
    work term ``term`` and its record count (0 for either: not checkable)."""
    for session in sorted(sessions, key=lambda s: s.name):
        registration = session.registration
        cap = getattr(registration.terms, term) if registration.HasField("terms") else 0.0
        records = int(registration.num_records)
        if cap > 0 and records > 0:
            yield session, cap, records


def _planned_work(releases: Sequence[PlannedRelease], site: str, dim: int, records: int
                  ) -> Iterator[tuple[str, float]]:
    """(kernel, public work estimate) of each planned release site ``site`` answers."""
    for release in releases:
        if release.sites is not None and site not in release.sites:
            continue
        kernel = get_kernel(release.kernel)
        yield release.kernel, kernel.work(kernel.Params.from_wire(release.params, dim), dim,
                                          records)


def check_estimator(spec: pb.JobSpec, hyperparameters: Mapping[str, Any],
                    has_public_source: bool) -> PrivateEstimator:
    """Build the job's estimator, once, and make the checks its ``fit`` would
    make that the launch has not made yet (``validate_spec`` and
    ``validate_hyperparameters`` run first: each value is checked once), so
    a value it rejects is refused at launch rather than after the job
    started; refuse a job that needs a public sample the coordinator lacks.
    Returns the estimator, unfitted: the job's dry run and its run fit it
    without checking it again."""
    estimator = estimator_for(spec, hyperparameters, spec.seed if spec.HasField("seed") else 0)
    try:
        estimator._validate_params(checked_at_launch(type(estimator), hyperparameters))
    except InvalidParameterError as err:
        raise ConfigError(f"job: {err}") from None
    if estimator.needs_public_source() and not has_public_source:
        raise ConfigError(f"job: {spec.algorithm} needs the public source sample (as its "
                          "hyperparameters are set), and this coordinator has none: set "
                          "[coordinator] public_source in its configuration")
    return estimator


@dataclass(frozen=True)
class JobPlan:
    """The job's releases and each registered site's preview; ``note`` says
    why there is none (no named site has registered yet, or the algorithm
    could not be run on stand-ins)."""

    releases: Sequence[PlannedRelease] = ()
    previews: list[SiteBudgetPreview] = field(default_factory=list)
    note: str = ""


def plan_job(spec: pb.JobSpec, hyperparameters: Mapping[str, Any],
             sessions: Sequence[SiteSession], public_source: Dataset | None,
             public_sources: tuple[Dataset, ...] = (),
             estimator: PrivateEstimator | None = None) -> JobPlan:
    """The privacy plan of ``spec`` over its registered sites: their public
    sizes (None under add/remove), dimension, adjacency and reported budget.
    ConfigError for what the algorithm itself refuses on these sites.
    ``estimator``: the one :func:`check_estimator` built (a clone of it is
    fitted on stand-ins); None: built from the spec and validated by its fit."""
    named = [s for s in sessions if s.name in set(spec.sites)]
    if not named:
        return JobPlan(note="no plan yet: none of the job's sites has registered")
    registrations = {s.name: s.registration for s in named}
    adjacencies = {name: Adjacency(r.adjacency or Adjacency.REPLACE_ONE.value)
                   for name, r in registrations.items()}
    sizes = {name: (None if adjacencies[name] == Adjacency.ADD_REMOVE_ONE
                    else int(r.num_records)) for name, r in registrations.items()}
    dim = max(int(r.num_features) for r in registrations.values())
    try:
        releases = plan_releases(spec, hyperparameters, sizes, dim, public_source,
                                 public_sources, estimator)
    except (PrivadaptError, InvalidParameterError) as err:
        # What the estimator's fit refuses about its own parameters (a
        # dp_lloyd_kmeans job that also sets rho) fails the job before any
        # query at run time: refused here instead.
        raise ConfigError(f"job: {err}") from None
    except Exception as err:  # the preview must not stop a launch the sites would check
        logger.warning("dry run of %s: the algorithm could not be run on stand-ins: %s",
                       spec.algorithm, err)
        return JobPlan(note=f"no plan: the algorithm could not be previewed ({err}); each "
                       "site's ledger still refuses any release over its cap")
    check_job_work(releases, named, dim)
    check_kernels_allowed(releases, named)
    check_noise_grid(releases, JOB_GRID, dim)
    check_query_work(releases, named, dim)
    budgets = {s.name: s.budget for s in named if s.budget is not None}
    return JobPlan(releases, previews_for(releases, spec.sites, adjacencies, budgets, dim,
                                          sizes))


def registered_digest(registration: pb.RegisterRequest) -> SchemaDigest | None:
    """The schema digest a site registered (checked at Register), if any."""
    if not registration.HasField("schema"):
        return None
    return SchemaDigest.from_proto(registration.schema)


def dry_run_plan(spec: pb.JobSpec, job_id: str, registered: Sequence[SiteRecord],
                 connected: set[str], public: SchemaDigest | None, plan: JobPlan) -> str:
    """What ``privadapt launch --dry-run`` prints: the job, each named site as
    the coordinator knows it, the checks that passed and the privacy plan."""
    records = {site.name: site for site in registered}
    sizes = [records[n].num_records for n in spec.sites if n in records
             and records[n].num_records > 0]
    lines = [f"dry run of {job_id or 'a new job'}: {spec.algorithm} epsilon={spec.epsilon:g} "
             f"delta={spec.delta:g} on {len(spec.sites)} site(s), rounds of at least "
             f"{spec.min_participants}; nothing was stored or started"]
    for name in spec.sites:
        site = records.get(name)
        if site is None:
            lines.append(f"  {name:<20} never registered: the job would wait for it")
            continue
        size = f"n={site.num_records}" if site.num_records else "n private (add/remove)"
        state = "connected" if name in connected else "away"
        lines.append(f"  {name:<20} {state:<10} {size:<24} kernels: "
                     f"{', '.join(site.kernels) or 'any'}")
    smallest = f"1/{min(sizes)}" if sizes else "no public size"
    reference = PUBLIC_SAMPLE if public is not None else "each other"
    lines.append(f"checked: hyperparameters and estimator; delta below 1e-3"
                 f"{' (allowed larger)' if spec.allow_large_delta else ''} and below "
                 f"{smallest}; schemas of the registered sites against {reference}; "
                 "the plan against each reported budget and the fixed-point grid")
    lines.extend(plan_lines(plan.releases, plan.previews) if not plan.note else [plan.note])
    return "\n".join(lines)
