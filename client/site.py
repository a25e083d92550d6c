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

Local blocks (``Kernel.local_block_shapes``, e.g. the per-record weights of
PCnvxAdap): the site noises them itself at the full sigma, lets the kernel
update the job's state with them, and releases only the other blocks; the
ledger charges the whole multi-block mechanism. For a kernel with per-record
state (``Kernel.per_record_state``) the state update runs on a copy that
replaces the job's state only after the charge has committed.

Poisson sampling (a ``GaussianMechanism`` with ``sampling_rate`` q < 1): the
site itself includes each of its records independently with probability q,
from the same random source as its noise (the OS CSPRNG in production), afresh
for every query, and runs the kernel on the sampled records only; the sample
never leaves the site, which is what amplification by subsampling assumes
(Abadi et al. 2016). Sensitivity still comes from clipping: one record's
add/remove contribution. The site refuses a sampled query when its cap is
stated under replace-one adjacency (the accountant has no sound replace-one
form of the amplification, see :mod:`privadapt.common.accounting`) and for
kernels with per-record state, which assumes every record.
Known limit: the kernel's running time grows with the sample's size.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privadapt.client.job_state import decode_state, encode_state
from privadapt.client.ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.data import Dataset, Schema, load_dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, SitePrivacy, SiteShare
from privadapt.common.fixed_point import FixedPointCodec
from privadapt.common.kernels import Kernel, KernelParams, get_kernel
from privadapt.common.kernels.grid_rounding import ACCEPTED_FRACTIONAL_BITS
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    Mechanism,
    NoNoise,
    declared_sensitivities,
)
from privadapt.common.noise import (
    NOISE_REACH,
    RandomBits,
    gaussian_noise,
    gaussian_share,
    honest_share_count,
    laplace_share,
    max_grid_safe_noise,
    uniforms,
)

logger = logging.getLogger(__name__)

# Declared sensitivities may differ from the site's by float rounding only.
_SENSITIVITY_SLACK = 1e-9


def _own_copy(params: Mapping[str, Any]) -> dict[str, Any]:
    """A private snapshot of the query's parameters: every later read (checks,
    sensitivity, the kernel) sees the same values, whatever object was sent."""
    copied: dict[str, Any] = {}
    for key, value in dict(params).items():
        if isinstance(value, np.ndarray | list | tuple):
            copied[str(key)] = np.array(value, copy=True)
        elif isinstance(value, bool | int | float | str | np.generic) or value is None:
            copied[str(key)] = value.item() if isinstance(value, np.generic) else value
        else:
            raise ValueError(f"parameter {key!r} has unsupported type {type(value).__name__}")
    return copied


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
        self._job_states: dict[str, dict[str, Any]] = {}

    @classmethod
    def open(
        cls,
        data_path: str | Path,
        policy: SitePolicy,
        ledger_path: str | Path,
        schema: Schema | None = None,
    ) -> Site:
        """A site over a data file, with its ledger database (created if absent)."""
        return cls(load_dataset(data_path, schema), policy, PrivacyLedger(ledger_path, policy))

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
        try:
            query = dataclasses.replace(query, params=_own_copy(query.params))
            honest_share_count(num_participants, query.collusion_tolerance)
        except ValueError as err:
            raise self._refuse(query, str(err)) from None
        kernel, params = self._checked_kernel(query, num_participants)
        codec = self._codec(query)
        charged = self._charged_mechanism(kernel, params, query, codec)
        self._check_range(kernel, params, query, num_participants, codec)
        local = kernel.per_record_state
        if local:
            # A working copy: the job's state changes only once the charge commits.
            state = copy.deepcopy(self._job_state(query.job_id))
            self._update_local_state(kernel, params, query, state)
        else:
            state = self._job_states.setdefault(query.job_id, {})
        blocks = kernel.compute(self._records_for(query), params, state)
        noise = self._noise_shares(blocks, query, num_participants)
        shares = tuple(
            codec.encode(value) + codec.encode(share)  # uint64: wraps modulo 2^64
            for value, share in zip(blocks, noise, strict=True)
        )
        # The new state is committed with the charge, in one transaction.
        charge = self.ledger.charge(query.job_id, query.query_id, charged,
                                    state=encode_state(state) if local else None)
        if local:
            self._job_states[query.job_id] = state
        logger.info(
            "site=%s job=%s query=%s kernel=%s epsilon_spent=%.4g",
            self.name, query.job_id, query.query_id, query.kernel, charge.epsilon_after,
        )
        return SiteShare(self.name, query.query_id, shares)

    def _records_for(self, query: Query) -> Dataset:
        """All records, or this query's own Poisson sample of them: record i is
        in when its fresh uniform u_i < q (P = q exactly, up to 2^-53)."""
        mechanism = query.mechanism
        if not (isinstance(mechanism, GaussianMechanism) and mechanism.is_sampled):
            return self._data
        chosen = uniforms(self.num_records, self._noise_source) < mechanism.sampling_rate
        data = self._data
        return Dataset(data.features[chosen], data.labels[chosen], data.feature_names)

    def _check_sampling(self, kernel: Kernel, query: Query) -> None:
        """Refuse a Poisson-sampled query this site cannot account soundly."""
        mechanism = query.mechanism
        if not (isinstance(mechanism, GaussianMechanism) and mechanism.is_sampled):
            return
        if self.policy.adjacency != Adjacency.ADD_REMOVE_ONE:
            raise self._refuse(
                query,
                f"a Poisson-sampled release (sampling rate {mechanism.sampling_rate:g}) is "
                "accounted under add/remove adjacency only, but this site's cap is stated "
                f"under {self.policy.adjacency}; ask the site operator for an add_remove_one "
                "policy, or query without sampling",
            )
        if kernel.per_record_state:
            raise self._refuse(query, "a kernel with local blocks runs on every record; "
                               "it cannot be Poisson-sampled")

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

    def _refuse(self, query: Query, reason: str) -> QueryRefusedError:
        return QueryRefusedError(
            f"site {self.name!r} refused query {query.query_id!r} of job {query.job_id!r} "
            f"(kernel {query.kernel!r}): {reason}"
        )

    def _checked_kernel(
        self, query: Query, num_participants: int
    ) -> tuple[Kernel, KernelParams]:
        """The query's kernel and its parameters, parsed once into the kernel's
        typed ``Params`` (every later step reads that object)."""
        policy = self.policy
        if policy.allowed_kernels is not None and query.kernel not in policy.allowed_kernels:
            raise self._refuse(query, f"the policy allows only {sorted(policy.allowed_kernels)}")
        try:
            kernel = get_kernel(query.kernel)
            params = kernel.Params.from_wire(query.params, self.dim)
        except (KeyError, ValueError, TypeError, OverflowError) as err:
            raise self._refuse(query, str(err)) from None
        if num_participants < policy.min_participants:
            raise self._refuse(
                query,
                f"{num_participants} participants, fewer than the policy's minimum "
                f"{policy.min_participants}",
            )
        if query.collusion_tolerance < policy.collusion_tolerance:
            raise self._refuse(
                query,
                f"the job tolerates t={query.collusion_tolerance} colluding sites but the "
                f"policy requires t >= {policy.collusion_tolerance}",
            )
        self._check_bounds(query, kernel.clip_bounds(params))
        return kernel, params

    def _check_bounds(self, query: Query, bounds: Mapping[str, float]) -> None:
        limits = {
            "clip_norm": self.policy.max_clip_norm,
            "label_bound": self.policy.max_label_bound,
        }
        for key, value in bounds.items():
            limit = limits.get(key)
            if limit is not None and value > limit:
                raise self._refuse(query, f"{key}={value:g} exceeds the policy's limit {limit:g}")

    def _codec(self, query: Query) -> FixedPointCodec:
        low, high = ACCEPTED_FRACTIONAL_BITS
        bits = query.fractional_bits
        if isinstance(bits, bool) or not isinstance(bits, int) or not low <= bits <= high:
            raise self._refuse(query, f"fractional_bits must be an integer in [{low}, {high}]")
        return FixedPointCodec(bits)

    def _charged_mechanism(
        self, kernel: Kernel, params: KernelParams, query: Query, codec: FixedPointCodec
    ) -> Mechanism:
        """The mechanism as this site accounts it: the noise the query asks
        for, against the kernel's own sensitivity under the policy's adjacency,
        plus what rounding onto the grid can add."""
        mechanism = query.mechanism
        if not isinstance(mechanism, GaussianMechanism | LaplaceMechanism | NoNoise):
            raise self._refuse(query, f"{type(mechanism).__name__} adds no noise a kernel can use")
        self._check_sampling(kernel, query)
        norm = "l1" if isinstance(mechanism, LaplaceMechanism) else "l2"
        declared = declared_sensitivities(mechanism)
        shapes = kernel.output_shapes(params, self.dim)
        if kernel.per_record_state and isinstance(mechanism, LaplaceMechanism):
            raise self._refuse(query, "a kernel with local blocks takes Gaussian noise only")
        num_local = len(kernel.local_l2_sensitivities(params, mechanism.adjacency))
        if len(declared) != len(shapes) + num_local:
            raise self._refuse(
                query, f"the mechanism has {len(declared)} blocks, the kernel "
                f"{len(shapes) + num_local}"
            )
        actual = kernel.sensitivities(params, mechanism.adjacency, norm, self.dim) \
            + kernel.local_l2_sensitivities(params, mechanism.adjacency)
        for block, (said, true) in enumerate(zip(declared, actual, strict=True)):
            if true > said * (1 + _SENSITIVITY_SLACK):
                raise self._refuse(
                    query,
                    f"block {block} declares {norm} sensitivity {said:g} but the kernel's "
                    f"clipping guarantees only {true:g}",
                )
        # Its own sensitivities under its policy's adjacency, plus the grid's
        # rounding on released blocks (local blocks never reach the grid).
        rounded = kernel.charged_sensitivities(params, self.policy.adjacency, norm, self.dim,
                                               codec.fractional_bits)
        charged = mechanism.with_sensitivities(rounded, self.policy.adjacency)
        self._check_noise(query, charged, codec, released_blocks=len(shapes))
        return charged

    def _check_range(
        self, kernel: Kernel, params: KernelParams, query: Query, num_participants: int,
        codec: FixedPointCodec,
    ) -> None:
        """Refuse a query whose aggregate could wrap modulo 2^64: if every site
        keeps its own share below 1/K of the range, the sum cannot wrap."""
        # Local blocks (which follow the released ones) never enter the aggregate.
        released = len(kernel.output_shapes(params, self.dim))
        noise_scale = max(_noise_scales(query.mechanism)[:released], default=0.0)
        bound = kernel.max_abs_sum(params, self.num_records) + NOISE_REACH * noise_scale
        try:
            codec.check_sum_bound(num_participants * bound, "the aggregate of this query")
        except OverflowError as err:
            raise self._refuse(query, str(err)) from None

    def _check_noise(
        self, query: Query, charged: Mechanism, codec: FixedPointCodec, released_blocks: int
    ) -> None:
        if isinstance(charged, NoNoise):
            if not charged.is_private and not self.policy.allow_non_private:
                raise self._refuse(query, "a release without noise is not private; the policy "
                                   "allows it only on simulation sites (allow_non_private)")
            return
        if isinstance(charged, GaussianMechanism):
            multiplier = charged.noise_multiplier
        else:
            multiplier = np.inf if charged.sensitivity == 0 else charged.scale / charged.sensitivity
        if multiplier < self.policy.min_noise_multiplier:
            raise self._refuse(
                query,
                f"noise multiplier {multiplier:.4g} is below the policy's minimum "
                f"{self.policy.min_noise_multiplier:g}",
            )
        # Only released blocks are rounded onto the grid; local noise stays a float.
        largest = max(_noise_scales(charged)[:released_blocks], default=0.0)
        if largest > max_grid_safe_noise(codec.fractional_bits):
            raise self._refuse(
                query,
                f"noise scale {largest:.4g} is too coarse for the fixed-point grid 2^-"
                f"{codec.fractional_bits}: ask for fewer fractional bits",
            )

    def _update_local_state(
        self, kernel: Kernel, params: KernelParams, query: Query, state: dict[str, Any]
    ) -> None:
        """Noise the kernel's local blocks at the full sigma (nobody else adds
        noise to them) and let the kernel update ``state`` with them."""
        try:
            local = kernel.compute_local(self._data, params, state)
        except ValueError as err:  # e.g. a step out of order
            raise self._refuse(query, str(err)) from None
        shapes = kernel.local_block_shapes(params, self.num_records)
        if tuple(value.shape for value in local) != tuple(shapes):
            raise self._refuse(query, f"the kernel's local blocks are not of shapes {shapes}")
        mechanism = query.mechanism
        if isinstance(mechanism, GaussianMechanism):
            local_blocks = mechanism.blocks[len(mechanism.blocks) - len(local):]
            noised = tuple(
                value + gaussian_noise(b.sigma, value.shape, self._noise_source)
                for value, b in zip(local, local_blocks, strict=True)
            )
        else:
            noised = local  # NoNoise: a simulation site allowed it in _check_noise
        kernel.apply_local(self._data, params, state, noised)

    def _noise_shares(
        self, blocks: tuple[np.ndarray, ...], query: Query, num_participants: int
    ) -> tuple[np.ndarray, ...]:
        mechanism, t = query.mechanism, query.collusion_tolerance
        source, sites = self._noise_source, num_participants
        if isinstance(mechanism, GaussianMechanism):
            # The released blocks come first; local blocks (if any) follow them.
            return tuple(
                gaussian_share(b.sigma, sites, t, value.shape, source)
                for value, b in zip(blocks, mechanism.blocks[: len(blocks)], strict=True)
            )
        if isinstance(mechanism, LaplaceMechanism):
            return tuple(
                laplace_share(mechanism.scale, sites, t, value.shape, source) for value in blocks
            )
        return tuple(np.zeros_like(value, dtype=np.float64) for value in blocks)


def _noise_scales(mechanism: Mechanism) -> list[float]:
    """The standard deviation (Gaussian) or scale (Laplace) of each block's noise."""
    if isinstance(mechanism, GaussianMechanism):
        return [b.sigma for b in mechanism.blocks]
    if isinstance(mechanism, LaplaceMechanism):
        return [mechanism.scale]
    return []
