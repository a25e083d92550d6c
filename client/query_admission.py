"""Whether a site answers a query, and what it will charge if it does.

Everything a site checks before it touches private data lives here, in the
order it is checked, so that ``Site.answer`` is one pipeline (DESIGN.md
section 2: the site, not the coordinator, enforces privacy). What the site
trusts from the coordinator: nothing about privacy. It parses the query's
parameters into the kernel's own typed ``Params``, computes the kernel's
sensitivity itself from those parameters and its policy's adjacency, and
charges the noise the query asks for against that sensitivity plus what
rounding onto the fixed-point grid can add
(:mod:`privadapt.common.kernels.grid_rounding`).

Every refusal is a :class:`QueryRefusedError` naming the site, the query, the
job and the kernel, raised before anything is computed on the data, released
or charged.

Whether a site answers, and every word of a refusal, depend only on public
things: the query, the policy and public sizes. Under add/remove adjacency n
is private, so the range check uses the policy's public bound on it
(:meth:`SitePolicy.range_records`), never n.

Poisson sampling (a Gaussian with ``sampling_rate`` q < 1) is accounted under
add/remove adjacency only, so a site whose cap is stated under replace-one
refuses it; so does a kernel with per-record state, which assumes every record.

Record parts (:mod:`privadapt.common.data.record_parts`): a query on one part of
the records under a replace-one policy is charged, block by block (score by
score for a selection), the larger of the kernel's replace-one and add/remove
sensitivities, since replacing a record can move it into or out of the part;
a kernel without an add/remove sensitivity is refused on a part. What a site
charges is computed by :mod:`privadapt.common.kernels.site_charge`, the rule a
coordinator's dry run previews with too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from privadapt.client.policy import SitePolicy
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import Kernel, KernelParams, get_kernel
from privadapt.common.kernels.grid_rounding import (
    ACCEPTED_FRACTIONAL_BITS,
)
from privadapt.common.kernels.site_charge import PartSensitivityError, on_records, site_charge
from privadapt.common.mechanisms import (
    Adjacency,
    KernelMechanism,
    Mechanism,
    SelectionMechanism,
)
from privadapt.common.noise.floating import NOISE_REACH, honest_share_count, max_grid_safe_noise
from privadapt.common.numerics.fixed_point import FixedPointCodec

# Declared sensitivities may differ from the site's by float rounding only.
_SENSITIVITY_SLACK = 1e-9

Shape = tuple[int, ...]


@dataclass(frozen=True)
class AdmittedQuery:
    """A query the site has agreed to answer, with everything the answer needs.

    ``query`` carries the site's own copy of the parameters; ``params`` is
    that copy parsed into the kernel's ``Params``; ``charged`` is the
    mechanism as this site accounts it (the query's noise against the site's
    own sensitivities under its policy's adjacency: a ``KernelMechanism`` for
    sums, a ``SelectionMechanism`` for a selection); ``released_shapes`` are
    the kernel's released blocks at this site (its local blocks, if any, have
    one entry per record of the part the site runs it on); ``work`` is the
    kernel's public estimate of what the query costs this site, spent from the
    job's compute budget when it runs (:mod:`privadapt.client.compute_budget`).
    """

    query: Query
    kernel: Kernel
    params: KernelParams
    codec: FixedPointCodec
    charged: Mechanism
    released_shapes: tuple[Shape, ...]
    work: float


class QueryAdmission:
    """The checks one site runs on every query, against its policy and the
    public sizes of its data (dimension d, record count n)."""

    def __init__(self, policy: SitePolicy, dim: int, num_records: int) -> None:
        self.policy = policy
        self.dim = dim
        self.num_records = num_records
        # Public: n under replace-one, the policy's bound on n under add/remove.
        self.range_records = policy.range_records(num_records)

    def admit(self, query: Query, num_participants: int) -> AdmittedQuery:
        """The admitted query, or ``QueryRefusedError`` saying why not."""
        try:
            query = dataclasses.replace(query, params=_own_copy(query.params))
            if query.form == ReleaseForm.SECURE_SUM:  # a per-site answer is not a share
                honest_share_count(num_participants, query.collusion_tolerance)
        except ValueError as err:
            raise self.refusal(query, str(err)) from None
        kernel, params, work = self._kernel_and_params(query, num_participants)
        self._check_form(query, num_participants)
        if isinstance(query.mechanism, KernelMechanism):
            try:  # e.g. fewer honest shares than a distributed discrete Gaussian is charged for
                query.mechanism.check_sharing(*noise_split(query, num_participants))
            except ValueError as err:
                raise self.refusal(query, str(err)) from None
        codec = self._codec(query)
        grid = query.mechanism.noise_grid_bits
        if grid is not None and grid != codec.fractional_bits:
            # Integer noise on another grid than the value's leaves the value's
            # low bits in the clear; scores read on another grid are rounded
            # again, uncharged (common/mechanisms/discrete_laplace.py).
            raise self.refusal(query, f"the mechanism is exact on the grid 2^-{grid} but the "
                               f"query rounds onto 2^-{codec.fractional_bits}")
        try:
            charged: Mechanism
            if query.mechanism.releases_index:
                charged = self._charged_selection(kernel, params, query, codec)
            else:
                charged = self._charged_mechanism(kernel, params, query, codec)
            released = kernel.output_shapes(params, self.dim)
            self._check_range(kernel, params, query, num_participants, codec, len(released))
        except (ArithmeticError, ValueError) as err:
            # Valid but extreme public parameters (a clip norm of 1e300) can make
            # a kernel's bounds overflow; nothing has touched the data yet, so it
            # is a refusal like any other (QueryRefusedError is neither type).
            raise self.refusal(query, f"the kernel's bounds cannot be computed for these "
                               f"parameters: {err}") from None
        return AdmittedQuery(query, kernel, params, codec, charged, released, work)

    def refusal(self, query: Query, reason: str) -> QueryRefusedError:
        return QueryRefusedError(
            f"site {self.policy.site_name!r} refused query {query.query_id!r} of job "
            f"{query.job_id!r} (kernel {query.kernel!r}): {reason}"
        )

    def _kernel_and_params(
        self, query: Query, num_participants: int
    ) -> tuple[Kernel, KernelParams, float]:
        """The query's kernel, its parameters, parsed once into the kernel's
        typed ``Params`` (every later step reads that object), and its work."""
        policy = self.policy
        if policy.allowed_kernels is not None and query.kernel not in policy.allowed_kernels:
            raise self.refusal(query, f"the policy allows only {sorted(policy.allowed_kernels)}")
        try:
            kernel = get_kernel(query.kernel)
            params = kernel.Params.from_wire(query.params, self.dim)
        except (KeyError, ValueError, TypeError, OverflowError) as err:
            raise self.refusal(query, str(err)) from None
        if num_participants < policy.min_participants:
            raise self.refusal(
                query,
                f"{num_participants} participants, fewer than the policy's minimum "
                f"{policy.min_participants}",
            )
        if (query.form == ReleaseForm.SECURE_SUM
                and query.collusion_tolerance < policy.collusion_tolerance):
            raise self.refusal(
                query,
                f"the job tolerates t={query.collusion_tolerance} colluding sites but the "
                f"policy requires t >= {policy.collusion_tolerance}",
            )
        self._check_bounds(query, kernel.clip_bounds(params))
        return kernel, params, self._check_work(query, kernel, params)

    def _check_work(self, query: Query, kernel: Kernel, params: KernelParams) -> float:
        """The query's estimated work, or a refusal when it exceeds the
        policy's ``max_query_work``. The estimate reads the query and the
        public record count (``range_records``) only, so the refusal and its
        words reveal nothing private."""
        limit = self.policy.max_query_work
        try:
            work = kernel.work(params, self.dim, self.range_records)
        except (ArithmeticError, ValueError):
            work = math.inf
        if limit is not None and not work <= limit:
            raise self.refusal(query, f"the query's estimated work, {work:.3g} multiply-adds, "
                               f"exceeds the policy's max_query_work {limit:.3g}")
        return work

    def _check_bounds(self, query: Query, bounds: Mapping[str, float]) -> None:
        limits = {
            "clip_norm": self.policy.max_clip_norm,
            "label_bound": self.policy.max_label_bound,
        }
        for key, value in bounds.items():
            limit = limits.get(key)
            if limit is not None and value > limit:
                raise self.refusal(query, f"{key}={value:g} exceeds the policy's limit {limit:g}")

    def _check_form(self, query: Query, num_participants: int) -> None:
        """Refuse a release form the query's mechanism or the policy forbids
        (common/federation.py, module docstring). Depends on the query, the
        policy and the verified roster size only."""
        if query.mechanism.releases_index:
            if query.form != ReleaseForm.PER_SITE:
                raise self.refusal(
                    query, "a selection mechanism releases an index that each site draws "
                    "itself; it is asked as a per_site query (federation.select), never summed")
            if num_participants != 1:
                raise self.refusal(
                    query, f"a selection is answered only when one site holds all of the "
                    f"job's private data, and this round has {num_participants} participants, "
                    "whose scores would have to be summed first; ask for the secure-sum form "
                    "of the same kernel instead (the noisy score vector, accounted as the "
                    "vector release it is) and select on the noisy sum")
        elif (query.form == ReleaseForm.PER_SITE and num_participants > 1
              and not self.policy.allow_per_site_releases):
            raise self.refusal(
                query, "the policy forbids per-site releases (allow_per_site_releases = "
                "false): the coordinator would see this site's own noised answer instead of "
                "only the masked sum over sites; ask for the secure-sum form")

    def _codec(self, query: Query) -> FixedPointCodec:
        low, high = ACCEPTED_FRACTIONAL_BITS
        bits = query.fractional_bits
        if isinstance(bits, bool) or not isinstance(bits, int) or not low <= bits <= high:
            raise self.refusal(query, f"fractional_bits must be an integer in [{low}, {high}]")
        return FixedPointCodec(bits)

    def _check_sampling(self, kernel: Kernel, params: KernelParams, query: Query) -> None:
        """Refuse a Poisson-sampled query this site cannot account soundly."""
        mechanism = query.mechanism
        if not mechanism.is_sampled:
            return
        if self.policy.adjacency != Adjacency.ADD_REMOVE_ONE:
            raise self.refusal(
                query,
                f"a Poisson-sampled release (sampling rate {mechanism.sampling_rate:g}) is "
                "accounted under add/remove adjacency only, but this site's cap is stated "
                f"under {self.policy.adjacency}; ask the site operator for an add_remove_one "
                "policy, or query without sampling",
            )
        # Local blocks are computed over every record, which the sampled charge
        # would not cover; per-record state assumes every record too.
        if kernel.per_record_state or kernel.local_l2_sensitivities(params, mechanism.adjacency):
            raise self.refusal(query, "a kernel with local blocks runs on every record; "
                               "it cannot be Poisson-sampled")

    def _charged_mechanism(
        self, kernel: Kernel, params: KernelParams, query: Query, codec: FixedPointCodec
    ) -> KernelMechanism:
        """The mechanism as this site accounts it: the noise the query asks
        for, against the kernel's own sensitivity under the policy's adjacency,
        plus what rounding onto the grid can add."""
        mechanism = query.mechanism
        if not mechanism.releases_kernel_sums:
            raise self.refusal(query, f"{type(mechanism).__name__} adds no noise a kernel "
                               "can use")
        self._check_sampling(kernel, params, query)
        if kernel.per_record_state and not mechanism.supports_local_blocks:
            raise self.refusal(query, "a kernel with local blocks takes Gaussian noise only")
        norm = mechanism.noise_norm
        declared = mechanism.sensitivities
        # What the query's own adjacency implies, block by block (released, then local).
        actual = self._worst(query, mechanism.adjacency, lambda adjacency: (
            kernel.sensitivities(params, adjacency, norm, self.dim)
            + kernel.local_l2_sensitivities(params, adjacency)))
        if len(declared) != len(actual):
            raise self.refusal(
                query, f"the mechanism has {len(declared)} blocks, the kernel {len(actual)}"
            )
        released = len(kernel.output_shapes(params, self.dim))
        if len(mechanism.noise_scales) < released:
            # A released block in the local group would be noised as no share at all.
            raise self.refusal(
                query, f"the mechanism noises {len(mechanism.noise_scales)} released blocks, "
                f"the kernel releases {released}"
            )
        for block, (said, true) in enumerate(zip(declared, actual, strict=True)):
            if true > said * (1 + _SENSITIVITY_SLACK):
                raise self.refusal(
                    query,
                    f"block {block} declares {norm} sensitivity {said:g} but the kernel's "
                    f"clipping guarantees only {true:g}",
                )
        charged = cast(KernelMechanism, self._site_charge(kernel, params, query, codec))
        self._check_noise(query, charged, codec, released)
        return charged

    def _charged_selection(
        self, kernel: Kernel, params: KernelParams, query: Query, codec: FixedPointCodec
    ) -> SelectionMechanism:
        """The selection mechanism as this site accounts it: the query's
        randomisation against the kernel's own per-candidate score
        sensitivities under the policy's adjacency, each plus one grid step
        2^-f and the floating-point error of computing it
        (:func:`~privadapt.common.kernels.grid_rounding.score_rounding_charged`):
        the site rounds every score onto the grid before it draws (so the
        scores it selects on are a function of the rounded sums)."""
        mechanism = query.mechanism
        if not isinstance(mechanism, SelectionMechanism):
            raise self.refusal(query, f"{type(mechanism).__name__} is not a selection mechanism")
        if kernel.per_record_state or kernel.local_block_shapes(params, self.range_records):
            raise self.refusal(query, "a kernel with local blocks cannot answer a selection")
        try:
            actual = self._worst(query, mechanism.adjacency, lambda adjacency: (
                kernel.score_sensitivities(params, adjacency, self.dim)))
            # Rounding and float error, from public bounds only (grid_rounding).
            charged = cast(SelectionMechanism, self._site_charge(kernel, params, query, codec))
        except ValueError as err:
            raise self.refusal(query, str(err)) from None
        declared = mechanism.score_sensitivities
        if len(declared) == 1:  # one uniform sensitivity: every candidate's
            declared = declared * len(actual)
        if len(declared) != len(actual):
            raise self.refusal(query, f"the mechanism declares {len(declared)} score "
                               f"sensitivities, the kernel scores {len(actual)} candidates")
        for candidate, (said, true) in enumerate(zip(declared, actual, strict=True)):
            if true > said * (1 + _SENSITIVITY_SLACK):
                raise self.refusal(
                    query, f"candidate {candidate} declares score sensitivity {said:g} but the "
                    f"kernel's clipping guarantees only {true:g}")
        # The policy's noise floor holds for selections too: a selection of
        # pure epsilon e has the Laplace-equivalent noise multiplier 1 / e.
        if charged.is_non_private and not self.policy.allow_non_private:
            raise self.refusal(query, "a selection without noise is not private; the policy "
                               "allows it only on simulation sites (allow_non_private)")
        epsilon = charged.pure_epsilon
        if epsilon > 0 and 1.0 / epsilon < self.policy.min_noise_multiplier:
            raise self.refusal(
                query, f"this selection costs epsilon {epsilon:.4g}, a noise multiplier of "
                f"{1.0 / epsilon:.4g} (1/epsilon), below the policy's minimum "
                f"{self.policy.min_noise_multiplier:g}")
        return charged

    def _worst(
        self, query: Query, adjacency: Adjacency,
        sensitivities: Callable[[Adjacency], tuple[float, ...]],
    ) -> tuple[float, ...]:
        """``sensitivities`` on the query's records under ``adjacency``
        (:func:`~privadapt.common.kernels.site_charge.on_records`); a refusal
        when a part needs an add/remove sensitivity the kernel does not define."""
        try:
            return on_records(query.records, adjacency, sensitivities)
        except PartSensitivityError as err:
            raise self.refusal(query, str(err)) from None

    def _site_charge(self, kernel: Kernel, params: KernelParams, query: Query,
                     codec: FixedPointCodec) -> Mechanism:
        """The query's mechanism as this site charges it: its noise against
        the kernel's own sensitivities under the policy's adjacency, with the
        grid's rounding and the float error at the public record bound (the
        kernel's own float rounding grows with n)."""
        try:
            return site_charge(kernel, params, query.mechanism, query.records,
                               self.policy.adjacency, self.dim, codec.fractional_bits,
                               self.range_records)
        except PartSensitivityError as err:
            raise self.refusal(query, str(err)) from None

    def _check_noise(
        self, query: Query, charged: KernelMechanism, codec: FixedPointCodec, num_released: int
    ) -> None:
        if charged.is_non_private:
            if not self.policy.allow_non_private:
                raise self.refusal(query, "a release without noise is not private; the policy "
                                   "allows it only on simulation sites (allow_non_private)")
            return
        multiplier = charged.noise_multiplier
        if multiplier < self.policy.min_noise_multiplier:
            raise self.refusal(
                query,
                f"noise multiplier {multiplier:.4g} is below the policy's minimum "
                f"{self.policy.min_noise_multiplier:g}",
            )
        # Only released blocks are rounded onto the grid; local noise stays a float.
        largest = max(charged.noise_scales[:num_released], default=0.0)
        if largest > max_grid_safe_noise(codec.fractional_bits):
            raise self.refusal(
                query,
                f"noise scale {largest:.4g} is too coarse for the fixed-point grid 2^-"
                f"{codec.fractional_bits}: ask for fewer fractional bits",
            )

    def _check_range(
        self,
        kernel: Kernel,
        params: KernelParams,
        query: Query,
        num_participants: int,
        codec: FixedPointCodec,
        num_released: int,
    ) -> None:
        """Refuse a query whose aggregate could wrap modulo 2^64: if every site
        keeps its own share below 1/K of the range, the sum cannot wrap. A
        per-site answer is not summed; a selection's scores carry no noise."""
        mechanism = query.mechanism
        noise_scale = 0.0 if mechanism.releases_index else max(
            mechanism.noise_scales[:num_released], default=0.0)
        bound = kernel.max_abs_sum(params, self.range_records) + NOISE_REACH * noise_scale
        summed = 1 if query.form == ReleaseForm.PER_SITE else num_participants
        try:
            codec.check_sum_bound(summed * bound, "the aggregate of this query")
            # A private value beyond its public bound saturates
            # (fixed_point.encode_saturating) instead of erring after the kernel.
            codec.check_share_bound(bound, "one site's share of this query")
        except OverflowError as err:
            raise self.refusal(query, str(err)) from None


def noise_split(query: Query, num_participants: int) -> tuple[int, int]:
    """(shares, collusion tolerance) the noise of ``query`` is split into: a
    per-site answer carries the whole noise (one share, no other site adds
    any); a secure sum, one share per participant."""
    if query.form == ReleaseForm.PER_SITE:
        return 1, 0
    return num_participants, query.collusion_tolerance


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
