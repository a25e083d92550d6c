"""The Site: the one place a query meets private data.

``Site.answer`` validates a query against the site's policy, runs the kernel,
draws this site's noise share, charges the ledger (committed before anything is
returned) and returns the share. The same class answers in-process
(``LocalFederation``) and behind the site daemon, so policy, ledger and noise
are exercised identically in experiments and in production (DESIGN.md 2, 4).

What the site trusts from the coordinator: nothing about privacy. It computes
the kernel's sensitivity itself, from the public parameters and its own policy's
adjacency, and charges the noise it actually adds against that sensitivity.

Floating point (Mironov 2012): the share leaves as integers on the fixed-point
grid 2^-f. The kernel sum and the noise share are rounded onto the grid
*separately*, so the release equals (rounded sum) + (noise rounded to the grid):
a post-processing of the ideal mechanism on the rounded sum, whose sensitivity is
the kernel's plus sqrt(size) 2^-f (each coordinate's rounding moves it by at most
half a step); that is what the site charges
(:mod:`privadapt.common.kernels.grid_rounding`, the one formula algorithms size
their noise with too). The noise sampler resolves the grid
for every noise level the site accepts (``max_grid_safe_noise``).

One pipeline for every kernel: :mod:`privadapt.client.query_admission` checks
the query against the policy and says what it costs; the ledger checks that it
can afford it and reserves that budget until the charge commits or the answer
ends (``PrivacyLedger.reservation``) and the kernel that the job's state admits it
(``Kernel.check_state``), all before any record is read, so that no unpriced
refusal takes data-dependent time; then local blocks
(``Kernel.local_block_shapes``, empty for most kernels; e.g. the per-record
weights of PCnvxAdap) are noised by the site itself at the full sigma of the
mechanism's local group and handed back to the kernel to update the job's
state; then the released blocks are computed, noised with this site's share
and rounded onto the grid; then the ledger charges the whole mechanism
(released and local blocks together). The state update runs on a working copy
that replaces the job's state only once the charge has committed, in the same
transaction.

Compute and memory (:mod:`privadapt.client.compute_budget`): every query's
public work estimate is spent from its job's compute budget (and, when its
release costs less than the policy's ``min_query_epsilon``, from the site's
pool of unpaid work) once the ledger has reserved its privacy budget and
before any record is read; a query over either is refused in public words.
The site bounds the exact samplers' cached tables by its policy's
``max_sampler_table_bytes`` when it starts
(:func:`~privadapt.common.noise.table_inversion.bound_table_memory`).

Poisson sampling (a ``GaussianMechanism`` with ``sampling_rate`` q < 1): the
site itself includes each of its records independently with probability q,
from the same random source as its noise (the OS CSPRNG in production), afresh
for every query, and runs the kernel on the sampled records only; the sample
never leaves the site, which is what amplification by subsampling assumes
(Abadi et al. 2016). Sensitivity still comes from clipping: one record's
add/remove contribution. The site refuses a sampled query when its cap is
stated under replace-one adjacency (the accountant has no sound replace-one
form of the amplification, see :mod:`privadapt.common.accounting.accountant`) and for
kernels with per-record state, which assumes every record.
Known limit: the kernel's running time grows with the sample's size.

Record parts (a query's ``records``, :mod:`privadapt.common.data.record_parts`):
the site runs everything of the query -- local blocks and the job's state
update, the released sums, a selection's scores, and Poisson sampling (which
then samples within the part) -- on that part of its records only; the
admission charges what a part costs. A kernel with per-record state keeps one
value per record of the part its state was created on, so the site binds the
job's state to that part and refuses a query of the job on another one
(rather than refusing parts for such kernels: a selection job trains
PCnvxAdap-style candidates on the training part). The job's state is one
mapping per job, which a kernel may key further: the ``reweighted_gradient``
kernel keeps one state per chain in it (several descents in one job,
:mod:`privadapt.common.kernels.reweighted_chains`), all bound to the job's
part, the chain bound checked by ``Kernel.check_state`` before any charge.

Release forms (common/federation.py). A ``per_site`` query runs the same
pipeline with the *full* noise (one share among one site) and its answer is
not masked by the site worker. A selection (a mechanism that releases an
index) computes the kernel's one vector of scores, rounds it onto the grid,
draws the mechanism's choice from the site's own noise source, charges the
ledger, and only then returns the index (a block of shape (1,)).

Uncertified kernels. A kernel that checks its own floating-point error a
posteriori (``exact_discrepancy``, ``smoothed_discrepancy_gradient``) raises
``UncertifiedComputationError`` when the check fails, which happens only if a
numerical library broke its documented accuracy. Releasing would
under-charge, and whether the check fails can depend on the data, so a
refusal on that query is a one-bit release that nothing charges. The site
bounds it: before such a kernel reads a record, its latch is *armed* in the
ledger database (:mod:`privadapt.client.ledger.latches`), committed durably;
a pass unarms it, and a failure (or a crash, or any other error) leaves it
set. The site logs the details for its operator and refuses in fixed words;
every later query of the kernel -- in this process, after a restart, or in
another process on the same ledger, even while the certificate runs -- is
refused in the same words before anything is admitted, reserved, charged or
read. Only the operator clears a latch (``privadapt ledger clear-latch``).
What leaks is the position of the first failure among the kernel's
certificates between clearings (client/ledger/latches.py: at most
log2(Q + 1) bits over Q of them); the policy's ``max_certificates`` bounds Q
by a public number: the certificate that reaches it latches the kernel as
*exhausted*, refused from then on in other fixed words, which name that
number, until the operator clears it.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np

from privadapt.client.compute_budget import ComputeBudget
from privadapt.client.job_state import decode_state, encode_state
from privadapt.client.ledger.admission import CheckedCharge
from privadapt.client.ledger.latches import EXHAUSTED, KernelLatch
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.query_admission import AdmittedQuery, QueryAdmission, noise_split
from privadapt.common.data.dataset import Dataset, Schema, load_dataset
from privadapt.common.data.record_parts import RecordPart, RecordSplitter
from privadapt.common.errors import QueryRefusedError, UncertifiedComputationError
from privadapt.common.federation import Query, SitePrivacy, SiteShare
from privadapt.common.noise.floating import RandomBits, uniforms
from privadapt.common.noise.table_inversion import bound_table_memory
from privadapt.common.secure.query_digest import canonical_encoding

# Where a job's per-record state records the part it was created on (absent:
# every record, as for state from before record parts).
_STATE_PART_KEY = "record_part"

# The refusal of a latched kernel, whenever and by whichever query it was
# latched: fixed words (module docstring).
DISABLED_KERNEL_REASON = (
    "this site has disabled the kernel: its floating-point error certificate failed on a "
    "query (a numerical library outside its documented accuracy); the site's operator must "
    "investigate and clear the kernel's latch in the site's ledger to enable it again")
# The refusal once the kernel ran the policy's max_certificates since its
# latch was last cleared: public words (the count follows from the queries).
EXHAUSTED_KERNEL_REASON = (
    "this site has run the most floating-point error certificates of the kernel its policy "
    "allows between two clearings of its latch (max_certificates = {limit}); the site's "
    "operator must clear the kernel's latch in the site's ledger to enable it again")

logger = logging.getLogger(__name__)


class Site:
    """A data holder with a policy and a privacy ledger that answers queries."""

    def __init__(
        self,
        data: Dataset,
        policy: SitePolicy,
        ledger: PrivacyLedger,
        noise_source: RandomBits | None = None,
    ) -> None:
        self._data = data
        self.policy = policy
        self.ledger = ledger
        self._noise_source = noise_source
        self._admission = QueryAdmission(policy, data.dim, data.num_records)
        self.compute = ComputeBudget(policy)
        bound_table_memory(policy.max_sampler_table_bytes)
        self._splitter = RecordSplitter(data)
        self._job_states: dict[str, dict[str, Any]] = {}
        self._certificate_lock = threading.Lock()
        for latch in ledger.latches():
            if latch.active:
                logger.warning(
                    "site=%s kernel=%s is latched off since its certificate failed at %s "
                    "(job=%s query=%s); its queries are refused until the operator clears the "
                    "latch", self.name, latch.kernel, latch.latched_at, latch.job_id,
                    latch.query_id)

    @classmethod
    def open(
        cls,
        data_path: str | Path,
        policy: SitePolicy,
        ledger_path: str | Path,
        schema: Schema | None = None,
        *,
        create_ledger: bool = False,
    ) -> Site:
        """A site over a data file, with its ledger database, which must exist
        (``privadapt ledger init``) unless ``create_ledger``."""
        ledger = PrivacyLedger(ledger_path, policy, create=create_ledger)
        return cls(load_dataset(data_path, schema), policy, ledger)

    @property
    def name(self) -> str:
        return self.policy.site_name

    @property
    def num_records(self) -> int:
        return self._data.num_records

    @property
    def dim(self) -> int:
        return self._data.dim

    def answer(self, query: Query, num_participants: int) -> SiteShare:
        """This site's privatised share of ``query`` among ``num_participants``
        sites, encoded on the fixed-point grid; raises ``QueryRefusedError`` (or
        ``BudgetExceededError``) when the policy forbids it, before anything is
        released."""
        latch = self.ledger.active_latch(query.kernel)
        if latch is not None:
            raise self._refusal(query, latch)
        admitted = self._admission.admit(query, num_participants)
        # Every refusal the query and the job's state decide comes before any
        # private data is read (records split, kernel): a refusal is unpriced,
        # so it must not take data-dependent time. The check
        # reserves the budget until the charge commits, and any other exit
        # releases it, so a concurrent query is refused at its own check.
        with self.ledger.reservation(admitted.query.job_id, admitted.query.query_id,
                                     admitted.charged) as checked:
            if admitted.charged.releases_index:
                return self._select(admitted, checked)
            return self._answer_sums(admitted, checked, num_participants)

    def _answer_sums(self, admitted: AdmittedQuery, checked: CheckedCharge,
                     num_participants: int) -> SiteShare:
        """A sum release (shared or per site), its budget reserved by ``checked``."""
        query, kernel, params = admitted.query, admitted.kernel, admitted.params
        stored = self._job_state(query.job_id)
        if kernel.per_record_state:
            self._refuse_other_part(admitted, stored)
        try:
            kernel.check_state(params, stored)
        except ValueError as err:  # e.g. a step out of order
            raise self._admission.refusal(query, str(err)) from None
        self._spend_work(admitted)
        records = self._splitter.records(query.records)
        # A working copy: the job's state changes only once the charge commits.
        state = copy.deepcopy(stored)
        if kernel.per_record_state and not state and not query.records.is_all:
            state[_STATE_PART_KEY] = _part_fingerprint(query.records)
        self._update_local_state(admitted, state, records)
        blocks = self._compute(admitted, self._sampled(admitted, records), state)
        noise = admitted.charged.noise_shares(admitted.released_shapes,
                                              *noise_split(query, num_participants),
                                              self._noise_source)
        codec = admitted.codec
        shares = tuple(
            # The value saturates (never raises after the kernel ran: fixed_point.py);
            # the noise depends on no record, so its encoding may refuse.
            codec.encode_saturating(value) + codec.encode(share)  # uint64: wraps mod 2^64
            for value, share in zip(blocks, noise, strict=True)
        )
        # The new state is committed with the charge, in one transaction.
        kept = kernel.per_record_state
        self.ledger.charge(query.job_id, query.query_id, admitted.charged,
                           state=encode_state(state) if kept else None,
                           checked=checked, kernel=query.kernel)
        if kept:
            self._job_states[query.job_id] = state
        # No figure: the running bound a charge is admitted under is not the
        # spend (common/privacy_figures.py); the daemon logs the job's spend.
        logger.info("site=%s job=%s query=%s kernel=%s charged", self.name, query.job_id,
                    query.query_id, query.kernel)
        return SiteShare(self.name, query.query_id, shares)

    def _select(self, admitted: AdmittedQuery, checked: CheckedCharge) -> SiteShare:
        """A selection: the index the charged mechanism picks among the
        kernel's scores (rounded onto the grid, as charged), released only
        once the ledger has committed the charge."""
        query, codec = admitted.query, admitted.codec
        self._spend_work(admitted)
        records = self._splitter.records(query.records)
        (scores,) = self._compute(admitted, records, {})
        rounded = codec.decode(codec.encode_saturating(scores))
        index = admitted.charged.select(rounded, self._noise_source)
        self.ledger.charge(query.job_id, query.query_id, admitted.charged,
                           checked=checked, kernel=query.kernel)
        logger.info("site=%s job=%s query=%s kernel=%s selection charged", self.name,
                    query.job_id, query.query_id, query.kernel)
        return SiteShare(self.name, query.query_id, (np.array([index], dtype=np.uint64),))

    def _spend_work(self, admitted: AdmittedQuery) -> None:
        """Spend the query's work from its job's compute budget (and the
        unpaid pool), or refuse it in public words before any record is read."""
        query = admitted.query
        try:
            spent = self.compute.spend(query.job_id, admitted.work, admitted.charged)
        except ValueError as err:
            raise self._admission.refusal(query, str(err)) from None
        if spent.unpaid:
            # A site that bounds its unpaid pool wants to know what draws on
            # it; a simulation site (no bound, often a large delta_cap at which
            # every release costs epsilon 0) would log this for every query.
            log = logger.debug if self.policy.max_unpaid_work is None else logger.warning
            log(
                "site=%s job=%s query=%s kernel=%s: unpaid query (release below epsilon %g): "
                "%.3g multiply-adds from the unpaid pool", self.name, query.job_id,
                query.query_id, query.kernel, self.policy.min_query_epsilon, spent.work)

    def _compute(self, admitted: AdmittedQuery, records: Dataset,
                 state: dict[str, Any]) -> tuple[np.ndarray, ...]:
        """The kernel's released blocks, or a refusal in fixed words that
        disables the kernel when its error certificate fails (module docstring)."""
        query, kernel = admitted.query, admitted.kernel
        if kernel.certifies_own_error:
            return self._compute_certified(admitted, records, state)
        try:
            return kernel.compute(records, admitted.params, state)
        except UncertifiedComputationError as err:
            # Only a kernel that certifies its error raises this; latched after
            # the fact, as a defence, should another one ever do so.
            self._log_failed_certificate(query, err)
            self.ledger.latch_kernel(query.kernel, query.job_id, query.query_id)
            raise self._refusal(query) from None

    def _compute_certified(self, admitted: AdmittedQuery, records: Dataset,
                           state: dict[str, Any]) -> tuple[np.ndarray, ...]:
        """``compute`` of a kernel that certifies its own error, armed in the
        ledger first (client/ledger/latches.py): one certificate at a time per
        kernel, and any way it ends but a pass leaves the kernel latched."""
        query = admitted.query
        # One at a time in this process (a second query waits rather than be
        # refused); across processes the armed row refuses it.
        with self._certificate_lock:
            if not self.ledger.arm_certificate(query.kernel, query.job_id, query.query_id):
                raise self._refusal(query, self.ledger.active_latch(query.kernel))
            try:
                blocks = admitted.kernel.compute(records, admitted.params, state)
            except UncertifiedComputationError as err:
                self._log_failed_certificate(query, err)
                try:
                    self.ledger.end_certificate(query.kernel, query.job_id, query.query_id,
                                                failed=True)
                except sqlite3.Error:  # the armed row latches it already
                    logger.exception("site=%s kernel=%s: could not mark the latch failed",
                                     self.name, query.kernel)
                raise self._refusal(query) from None
            # Any other exception leaves the row armed: the kernel stays off.
            self.ledger.end_certificate(query.kernel, query.job_id, query.query_id,
                                        failed=False)
            return blocks

    def _log_failed_certificate(self, query: Query, err: Exception) -> None:
        logger.error(
            "site=%s job=%s query=%s kernel=%s certificate failed: %s (nothing released "
            "or charged; investigate the numerical libraries); the kernel is LATCHED OFF in "
            "the ledger until the operator clears it",
            self.name, query.job_id, query.query_id, query.kernel, err)

    def _refusal(self, query: Query, latch: KernelLatch | None = None) -> QueryRefusedError:
        """The refusal of a latched kernel: the failure's fixed words, or, for
        a kernel that ran its policy's certificates, the words naming them."""
        if latch is not None and latch.outcome == EXHAUSTED:
            return self._admission.refusal(query, EXHAUSTED_KERNEL_REASON.format(
                limit=self.policy.max_certificates))
        return self._admission.refusal(query, DISABLED_KERNEL_REASON)

    @property
    def disabled_kernels(self) -> frozenset[str]:
        """Kernels this site refuses until its operator clears their latch
        (their certificate failed), as its ledger records them."""
        return frozenset(latch.kernel for latch in self.ledger.latches() if latch.active)

    def _sampled(self, admitted: AdmittedQuery, records: Dataset) -> Dataset:
        """``records`` (the query's part), or this query's own Poisson sample
        of them: record i is in when its fresh uniform u_i < q (P = q
        exactly, up to 2^-53)."""
        mechanism = admitted.charged
        if not mechanism.is_sampled:
            return records
        chosen = uniforms(records.num_records, self._noise_source) < mechanism.sampling_rate
        return Dataset(records.features[chosen], records.labels[chosen], records.feature_names)

    def _refuse_other_part(self, admitted: AdmittedQuery, state: dict[str, Any]) -> None:
        """Refuse a query on another part than the one the job's existing
        per-record state was created on (its values belong to those records;
        ``answer`` binds a new state to its query's part). Depends only on the
        job's earlier queries."""
        part = admitted.query.records
        stored = state.get(_STATE_PART_KEY)
        if stored is None and not state:  # a new state: any part will do
            return
        bound = _part_fingerprint(RecordPart.ALL) if stored is None else np.asarray(stored)
        if not np.array_equal(bound, _part_fingerprint(part)):
            raise self._admission.refusal(
                admitted.query, "this job's per-record state was created on another part of "
                "the records than this query's; a kernel with per-record state must see the "
                "same records for the whole job (start a new job for another part)")

    def _update_local_state(
        self, admitted: AdmittedQuery, state: dict[str, Any], records: Dataset
    ) -> None:
        """Noise the kernel's local blocks at the full sigma (nobody else adds
        noise to them) and let the kernel update ``state`` with them; nothing
        happens for a kernel without local blocks."""
        kernel, params = admitted.kernel, admitted.params
        try:
            local = kernel.compute_local(records, params, state)
        except ValueError as err:  # e.g. a step out of order
            raise self._admission.refusal(admitted.query, str(err)) from None
        shapes = kernel.local_block_shapes(params, records.num_records)
        if tuple(value.shape for value in local) != tuple(shapes):
            raise self._admission.refusal(
                admitted.query, f"the kernel's local blocks are not of shapes {shapes}")
        noise = admitted.charged.local_noise(shapes, self._noise_source)
        noised = tuple(value + n for value, n in zip(local, noise, strict=True))
        kernel.apply_local(records, params, state, noised)

    def _job_state(self, job_id: str) -> dict[str, Any]:
        """The job's state, read back from the site database after a restart."""
        if job_id not in self._job_states:
            stored = self.ledger.job_state(job_id)
            self._job_states[job_id] = decode_state(stored) if stored is not None else {}
        return self._job_states[job_id]

    def privacy_spent(self, job_id: str, delta: float | None = None) -> SitePrivacy:
        """This site's spend on ``job_id`` (at ``delta``, default the cap's) and
        in total (at the cap's delta), from its own ledger."""
        return SitePrivacy(
            site_name=self.name,
            job=self.ledger.spent_by_job(job_id, delta),
            total=self.ledger.spent(),
            cap_epsilon=self.policy.epsilon_cap,
            mechanisms=tuple(c.mechanism for c in self.ledger.charges(job_id)),
        )


def _part_fingerprint(part: RecordPart) -> np.ndarray:
    """SHA-256 of the part's canonical description, as bytes a job state can hold."""
    digest = hashlib.sha256(canonical_encoding(part.to_dict())).digest()
    return np.frombuffer(digest, dtype=np.uint8).copy()
