"""A site's privacy policy: what the site operator allows, checked by the site.

DESIGN.md section 2: the site, not the coordinator, enforces privacy. The
policy is the operator's statement of that enforcement: a cap on the composed
privacy loss (``epsilon_cap`` at ``delta_cap``, in a stated adjacency and by a
stated accounting method), the kernels the site will run, the least noise it
accepts, how many colluding sites it assumes, and the largest data bounds a
query may ask it to clip to.

Operators write it as TOML::

    [site]
    name = "st-mary"
    simulation = false           # true: a test or simulation site, no real person's data
    [privacy]
    epsilon_cap = 5.0            # `inf` only for simulation/test sites
    delta_cap = 1e-5
    allow_large_delta = false    # true to state a delta_cap of 1e-3 or more on purpose
    adjacency = "replace_one"    # or "add_remove_one"
    max_records = 100000         # add_remove_one: a public bound on n (default 2^20)
    accounting = "pld"           # or "rdp"
    min_noise_multiplier = 0.5
    collusion_tolerance = 0
    min_participants = 2
    allow_non_private = false    # true only together with epsilon_cap = inf
    [queries]
    allowed_kernels = ["linear_gradient", "second_moments", "record_count"]
    max_clip_norm = 10.0
    max_label_bound = 10.0
    allow_per_site_releases = false  # let the coordinator see this site's own release
    max_query_work = 1e9         # refuse a query estimated above this many multiply-adds
    max_job_work = 5e10          # refuse a job's query once its queries total more
    min_query_epsilon = 1e-3     # a query charged less is "unpaid" (its work counts below)
    max_unpaid_work = 1e10       # the unpaid queries' work over every job, per daemon run
    max_sampler_table_bytes = 100663296  # exact samplers' cached tables, over every job
    max_certificates = 65535     # a self-certifying kernel's certificates between clearings
    [federation]
    peers = ["st-john", "st-luke"]   # optional: the only sites this site masks with

Poisson-sampled releases (noisy minibatch SGD) need no key of their own: their
amplification is accounted under add/remove adjacency only, so a site answers
them only under ``adjacency = "add_remove_one"`` and the default
(``replace_one``) refuses them (:mod:`privadapt.client.site`).

Under ``add_remove_one`` the number of records n is private, so nothing a
site says may depend on it: range checks on the fixed-point grid use the
public bound ``max_records`` instead (default :data:`DEFAULT_MAX_RECORDS`),
and a dataset larger than it is refused once, when the site loads it
(:meth:`SitePolicy.range_records`). Under ``replace_one`` n is public.

Compute and memory are budgets too (:mod:`privadapt.client.compute_budget`):
a coordinator chooses the public parameters that set a query's work (the
iterations of ``regularized_erm``, the candidates of ``validation_loss``), so
the policy bounds it per query (``max_query_work``) and per job
(``max_job_work``), in the kernels' declared work units (``Kernel.work``,
multiply-adds estimated from the query and the public record count). On the
reference machine (one core of the project's 2-core build host, numpy with
one BLAS thread, n = 43,000, d = 16, under a load of 10) the kernels ran 1.8e8
(``regularized_erm``, the slowest per unit) to 2e9 units a CPU second: the
defaults below are at most about 6 s of CPU a query and 5 min a job
(benchmarks/site_compute_bounds.py measures a site's own machine). They hold for every deployed
site; a simulation site (whose coordinator is the researcher running it)
has no compute bound unless it states one. A query whose release is
worth almost nothing (epsilon charged below ``min_query_epsilon``, from the
mechanism alone) would buy its work for free, and new jobs are free, so the
work of such *unpaid* queries also counts against ``max_unpaid_work``, one
pool over every job of this daemon's run. The exact noise samplers' cached
tables (:mod:`privadapt.common.noise.table_inversion`) are bounded by
``max_sampler_table_bytes`` over every job. A kernel that certifies its own
floating-point error runs at most ``max_certificates`` certificates between
two clearings of its latch, which bounds what the latch lets out by
log2(max_certificates + 1) bits (:mod:`privadapt.client.ledger.latches`).
Every one of these decisions reads public things only: the query, the
policy, the public record count and the earlier queries.

Every problem is reported as a ``ConfigError`` naming the file, the key and
what would be accepted, once, when the policy is loaded.

A deployed site's policy must cap something: outside a simulation
it refuses ``epsilon_cap = 0`` (the site could answer nothing),
``epsilon_cap = inf`` (nothing is capped), ``delta_cap >= 1e-3`` unless
``allow_large_delta = true`` says so on purpose (such a delta protects no one
in a few hundred records), and ``min_participants = 1`` (a "secure sum" over
this site alone shows the coordinator this site's own release). A *simulation
site* is one whose file says ``[site] simulation = true``, or
``allow_non_private = true`` (which only a simulation site may say); a policy
built in code (libraries, ``LocalFederation``, tests) is a simulation site
unless it passes ``simulation=False``, while a policy file is a deployed site
unless it says otherwise. The site daemon reads only files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.accounting.delta_guard import large_delta_refusal
from privadapt.common.config import Layout, read_sections, read_toml, render_toml, suggest
from privadapt.common.errors import ConfigError
from privadapt.common.kernels import registered_kernels
from privadapt.common.mechanisms import Adjacency
from privadapt.common.noise.table_inversion import LARGEST_TABLE_BYTES
from privadapt.common.validation import frozen_value

DEFAULT_MAX_RECORDS = 2**20
"""The public bound on n under add/remove adjacency when the policy declares
none: with the default 32 fractional bits the grid holds sums below 2^31, so
2^20 records leave room for per-record bounds of a few hundred among a few
sites. Declare ``max_records`` for a larger dataset (or a tighter range)."""

#: Per query: at most about 6 s of CPU at the slowest kernel's rate on the
#: reference machine (module docstring).
DEFAULT_MAX_QUERY_WORK = 1e9
#: Per job: at most about 5 min at the slowest rate; a noisy_gd job of 1,000
#: rounds over 10^5 records of 100 features needs 2e10.
DEFAULT_MAX_JOB_WORK = 5e10
#: Below this epsilon (one release, at the cap's delta) a query is unpaid: a
#: Gaussian release with noise multiplier about 1,700 or more, which no job
#: asks for on purpose (1,000 steps at a total epsilon of 1 need about 150).
DEFAULT_MIN_QUERY_EPSILON = 1e-3
#: Unpaid work over every job in one daemon run: at most about a minute at the
#: slowest rate.
DEFAULT_MAX_UNPAID_WORK = 1e10
#: The samplers' tables over every job: 96 MiB, the eight largest tables the
#: samplers cached before this bound (12 MiB each).
DEFAULT_MAX_SAMPLER_TABLE_BYTES = 96 * 2**20
#: Certificates of one self-certifying kernel between two clearings of its
#: latch: at most 16 bits of where the first failure fell; 65 discrepancy
#: minimisation jobs of 1,000 iterations each.
DEFAULT_MAX_CERTIFICATES = 2**16 - 1
#: Rounds a site opens (a key made, signed and published: about 0.3 ms of
#: CPU) that end without a paid answer, over every job of one daemon run: at
#: most about 3 s of CPU.
DEFAULT_MAX_UNPAID_ROUNDS = 10_000


def _is_number(value: Any) -> bool:
    # bool is an int subclass; `epsilon_cap = true` is a typo, not a number.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@frozen_value
class SitePolicy:
    """What a site allows. Validated on construction (``ConfigError``)."""

    site_name: str
    epsilon_cap: float
    delta_cap: float
    allowed_kernels: frozenset[str] | None = None
    min_noise_multiplier: float = 0.0
    collusion_tolerance: int = 0
    min_participants: int = 1
    adjacency: Adjacency = Adjacency.REPLACE_ONE
    accounting: AccountingMethod = AccountingMethod.PLD
    max_clip_norm: float | None = None
    max_label_bound: float | None = None
    allow_non_private: bool = False
    peers: frozenset[str] | None = None
    max_records: int | None = None
    #: Answer ``per_site`` queries among several sites (common/federation.py:
    #: each site adds the full noise and the coordinator sees its release,
    #: unmasked). True by default for libraries and simulations, where the
    #: coordinator is the researcher; deployed policies (deploy/policy.toml)
    #: say false unless the site operator agrees.
    allow_per_site_releases: bool = True
    #: A test or simulation site holding no real person's data: the deployment
    #: guards (:meth:`_check_deployment`) do not apply. True for policies built
    #: in code; a policy file is a deployed site unless it says
    #: ``simulation = true`` or ``allow_non_private = true`` (:meth:`from_dict`).
    simulation: bool = True
    #: A deployed site states a ``delta_cap`` of 1e-3 or more on purpose.
    allow_large_delta: bool = False
    #: The most multiply-adds one query may cost this site, by the kernel's
    #: public estimate (``Kernel.work``, from the query and the public record
    #: count). Refused before any data is read; bounds how much CPU a
    #: coordinator can make one query cost (module docstring). None: no bound,
    #: which only a simulation site may leave (a deployed one gets
    #: :data:`DEFAULT_MAX_QUERY_WORK`), like the two bounds below.
    max_query_work: float | None = None
    #: The most work all the queries of one job may cost, by the same estimate.
    max_job_work: float | None = None
    #: The epsilon (one release at ``delta_cap``) below which a query is unpaid.
    min_query_epsilon: float = DEFAULT_MIN_QUERY_EPSILON
    #: The most work unpaid queries may cost, over every job of one daemon run.
    max_unpaid_work: float | None = None
    #: The most bytes the exact samplers' tables may hold, over every job.
    max_sampler_table_bytes: int = DEFAULT_MAX_SAMPLER_TABLE_BYTES
    #: The most certificates a self-certifying kernel runs between two
    #: clearings of its latch (None: no bound, a simulation site's default).
    max_certificates: int | None = None
    #: The most rounds, over every job of one daemon run, that this site opens
    #: and that end without a paid answer (refused, aborted, never closed, or
    #: answered below ``min_query_epsilon``). None: no bound, a simulation
    #: site's default.
    max_unpaid_rounds: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.site_name, str) or not self.site_name.strip():
            raise ConfigError(f"site name must be a non-empty string, got {self.site_name!r}")
        if self.site_name != self.site_name.strip():
            raise ConfigError(f"site name {self.site_name!r} has leading or trailing spaces")
        self._check_privacy()
        self._check_queries()
        if not self.simulation:
            self._check_deployment()
        if self.peers is not None:
            peers = self.peers
            if isinstance(peers, str) or not all(isinstance(p, str) and p for p in peers):
                raise self._fail(f"peers must be a list of site names, got {peers!r}")
            self.peers = frozenset(peers)

    def range_records(self, num_records: int) -> int:
        """The record count this site's range checks may assume: n itself where
        n is public (replace-one), the public ``max_records`` where it is
        private (add/remove). ``ConfigError`` when the data holds more records
        than that bound: checked when the data is loaded, never per query."""
        if self.adjacency == Adjacency.REPLACE_ONE:
            return num_records
        bound = DEFAULT_MAX_RECORDS if self.max_records is None else self.max_records
        if num_records > bound:
            raise self._fail(
                f"the data holds more records than max_records = {bound}, the public bound "
                "on n that range checks use under add_remove_one adjacency; raise "
                "[privacy] max_records"
            )
        return bound

    def allowed_roster_names(self) -> frozenset[str] | None:
        """Who may be in a roster this site masks with: its peers and itself,
        or anyone with a site certificate from the CA if no peers are listed."""
        return None if self.peers is None else self.peers | {self.site_name}

    def _fail(self, message: str) -> ConfigError:
        return ConfigError(f"site policy {self.site_name!r}: {message}")

    def _check_privacy(self) -> None:
        cap = self.epsilon_cap
        if not _is_number(cap) or math.isnan(cap) or cap < 0:
            raise self._fail(
                f"epsilon_cap must be a number >= 0 (inf only for a simulation site), got {cap!r}"
            )
        self.epsilon_cap = float(cap)
        delta = self.delta_cap
        if not _is_number(delta) or not 0 <= delta < 1:
            raise self._fail(f"delta_cap must be a number in [0, 1) such as 1e-5, got {delta!r}")
        self.delta_cap = float(delta)
        for name, allowed, convert in (
            ("adjacency", Adjacency, Adjacency),
            ("accounting", AccountingMethod, AccountingMethod),
        ):
            value = getattr(self, name)
            try:
                setattr(self, name, convert(value))
            except ValueError:
                choices = ", ".join(repr(a.value) for a in allowed)
                raise self._fail(f"{name} must be one of {choices}, got {value!r}") from None
        z = self.min_noise_multiplier
        if not _is_number(z) or not math.isfinite(z) or z < 0:
            raise self._fail(f"min_noise_multiplier must be a finite number >= 0, got {z!r}")
        self.min_noise_multiplier = float(z)
        t, k = self.collusion_tolerance, self.min_participants
        if not _is_int(t) or t < 0:
            raise self._fail(f"collusion_tolerance must be a whole number >= 0, got {t!r}")
        if not _is_int(k) or k < 1:
            raise self._fail(f"min_participants must be a whole number >= 1, got {k!r}")
        bound = self.max_records
        if bound is not None and (not _is_int(bound) or not 1 <= bound < 2**53):
            raise self._fail(f"max_records must be a whole number in [1, 2^53), got {bound!r}")
        for flag in ("allow_non_private", "allow_large_delta", "simulation"):
            if not isinstance(getattr(self, flag), bool):
                raise self._fail(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.allow_non_private and not math.isinf(self.epsilon_cap):
            raise self._fail(
                "allow_non_private = true releases exact sums, which only a simulation or "
                "test site may do; it requires epsilon_cap = inf, but epsilon_cap is "
                f"{self.epsilon_cap:g}"
            )

    def _check_deployment(self) -> None:
        """Refuse a deployed policy that caps nothing or protects no one; each
        message names the key and what would be accepted."""
        cap, delta = self.epsilon_cap, self.delta_cap
        if cap == 0:
            raise self._fail("epsilon_cap = 0 lets this site answer no query at all; write "
                             "a positive lifetime cap such as epsilon_cap = 3.0")
        if math.isinf(cap):
            raise self._fail("epsilon_cap = inf caps nothing; write a finite lifetime cap such "
                             "as epsilon_cap = 3.0 (inf is for simulation sites: [site] "
                             "simulation = true)")
        refusal = large_delta_refusal(delta, "delta_cap", "[privacy] allow_large_delta")
        if refusal and not self.allow_large_delta:
            raise self._fail(refusal)
        if self.min_participants < 2:
            raise self._fail("min_participants = 1 lets a round of this site alone go ahead, "
                             "and a secure sum over one site shows the coordinator this "
                             "site's own release; write [privacy] min_participants = 2 or more")
        if self.allow_non_private:
            raise self._fail("allow_non_private = true releases exact sums, which only a "
                             "simulation site may do; set [site] simulation = true or "
                             "allow_non_private = false")

    def _check_queries(self) -> None:
        kernels = self.allowed_kernels
        if kernels is not None:
            if isinstance(kernels, str) or not isinstance(kernels, Iterable):
                raise self._fail(
                    f"allowed_kernels must be a list of kernel names, got {kernels!r}"
                )
            kernels = frozenset(kernels)
            known = set(registered_kernels())
            for name in sorted(kernels, key=str):
                if name not in known:
                    raise self._fail(
                        f"allowed_kernels names unknown kernel {name!r}{suggest(name, known)}; "
                        f"registered kernels: {sorted(known)}"
                    )
            self.allowed_kernels = kernels
        for name in ("max_clip_norm", "max_label_bound"):
            value = getattr(self, name)
            if value is None:
                continue
            if not _is_number(value) or not math.isfinite(value) or value <= 0:
                raise self._fail(f"{name} must be a finite number > 0 (or absent), got {value!r}")
            setattr(self, name, float(value))
        for name, default in (("max_query_work", DEFAULT_MAX_QUERY_WORK),
                              ("max_job_work", DEFAULT_MAX_JOB_WORK),
                              ("max_unpaid_work", DEFAULT_MAX_UNPAID_WORK)):
            work = getattr(self, name)
            if work is None:
                if not self.simulation:
                    setattr(self, name, default)
                continue
            if not _is_number(work) or not math.isfinite(work) or work < 1:
                raise self._fail(f"{name} must be a finite number >= 1 (work units, "
                                 f"multiply-adds), got {work!r}")
            setattr(self, name, float(work))
        if (self.max_job_work is not None and self.max_query_work is not None
                and self.max_job_work < self.max_query_work):
            raise self._fail(f"max_job_work ({self.max_job_work:.3g}) is below max_query_work "
                             f"({self.max_query_work:.3g}): a job could not afford one query")
        floor = self.min_query_epsilon
        if not _is_number(floor) or not math.isfinite(floor) or floor < 0:
            raise self._fail(f"min_query_epsilon must be a finite number >= 0, got {floor!r}")
        self.min_query_epsilon = float(floor)
        table = self.max_sampler_table_bytes
        if not _is_int(table) or table < LARGEST_TABLE_BYTES:
            raise self._fail(f"max_sampler_table_bytes must be a whole number of at least "
                             f"{LARGEST_TABLE_BYTES} (the largest table a sampler builds), "
                             f"got {table!r}")
        # Counts a deployed site bounds by default and a simulation only if it says.
        for name, default in (("max_certificates", DEFAULT_MAX_CERTIFICATES),
                              ("max_unpaid_rounds", DEFAULT_MAX_UNPAID_ROUNDS)):
            count = getattr(self, name)
            if count is None:
                if not self.simulation:
                    setattr(self, name, default)
            elif not _is_int(count) or count < 1:
                raise self._fail(f"{name} must be a whole number >= 1, got {count!r}")
        if not isinstance(self.allow_per_site_releases, bool):
            raise self._fail(f"allow_per_site_releases must be true or false, got "
                             f"{self.allow_per_site_releases!r}")

    @classmethod
    def from_toml(cls, path: str | Path) -> SitePolicy:
        """Load a policy file; ``ConfigError`` names the file and the bad key."""
        data = read_toml(path, "policy", "pass the path of the site's policy TOML")
        return cls.from_dict(data, source=f"policy file {path}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "site policy") -> SitePolicy:
        """Build a policy from the TOML layout (sections ``site``, ``privacy``,
        ``queries``, ``federation``); ``source`` prefixes every error message."""
        fields = read_sections(data, _LAYOUT, source)
        fields["site_name"] = fields.pop("name", None)
        for section, key, names in (("queries", "allowed_kernels", "kernel names"),
                                    ("federation", "peers", "site names")):
            if key in fields:
                # A list of lists or tables would not even make a set.
                if not all(isinstance(name, str) for name in fields[key]):
                    raise ConfigError(f"{source}: [{section}] {key} must be a list of "
                                      f"{names}, got {fields[key]!r}")
                fields[key] = frozenset(fields[key])
        # A file is a deployed site unless it says it is a simulation (or asks
        # for exact releases, which only a simulation site may).
        fields.setdefault("simulation", fields.get("allow_non_private", False) is True)
        try:
            return cls(**fields)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None

    def to_toml(self) -> str:
        """This policy as TOML that :meth:`from_toml` reads back equal: every
        field in its section, those left None (no limit) left out."""
        return render_toml({section: {key: getattr(self, "site_name" if key == "name" else key)
                                      for key in keys}
                            for section, keys in _LAYOUT.items()})


_NUMBER = (int, float)
#: The policy file: ``{section: {key: (accepted types, required)}}``; a key is
#: its field's name, but for [site] name (``site_name``). What each value may
#: be beyond its type is the class's own check.
_LAYOUT: Layout = {
    "site": {"name": (str, True), "simulation": (bool, False)},
    "privacy": {
        "epsilon_cap": (_NUMBER, True), "delta_cap": (_NUMBER, True),
        "adjacency": (str, False), "accounting": (str, False),
        "min_noise_multiplier": (_NUMBER, False), "collusion_tolerance": (int, False),
        "min_participants": (int, False), "max_records": (int, False),
        "allow_non_private": (bool, False), "allow_large_delta": (bool, False),
    },
    "queries": {
        "allowed_kernels": (list, False), "max_clip_norm": (_NUMBER, False),
        "max_label_bound": (_NUMBER, False), "allow_per_site_releases": (bool, False),
        "max_query_work": (_NUMBER, False), "max_job_work": (_NUMBER, False),
        "min_query_epsilon": (_NUMBER, False), "max_unpaid_work": (_NUMBER, False),
        "max_sampler_table_bytes": (int, False), "max_certificates": (int, False),
        "max_unpaid_rounds": (int, False),
    },
    "federation": {"peers": (list, False)},
}
