"""What a kernel is, its typed parameters, and the registry of kernels a site can run.

A kernel is a named site-side function (private records, public params, per-job
state) -> sum over records of clipped per-record contributions, one array per
block, together with the sensitivity its clipping guarantees under an adjacency.
Kernels are the only code that reads private records (DESIGN.md section 3).

Parameters are typed: each kernel has a frozen, self-validating ``Params``
class. ``Params.from_wire(params, dim)`` parses what arrives in a query (and
raises ``ValueError`` naming the bad parameter), ``to_wire()`` gives back the
dict a coordinator sends, so the wire format is plain values and every kernel
method receives an already-checked object. Sensitivities are functions of the
public parameters alone, never of the data: a site computes them itself and
refuses a mechanism that declares less. ``Kernel.mechanism`` builds, from the
same sensitivities, the mechanism an algorithm should ask for.

Local blocks (seed 000, Alg. 1 lines 10-11: per-record weights u_i that each
site updates with noise the algorithm prescribes). A query may have, besides
its *released* blocks (the clipped sums, which leave the site as noise shares
through secure aggregation), *local* blocks: per-record values the site noises
itself at the **full** sigma (nobody else adds noise to them), hands back to
the kernel to update its state, and never releases. One
``GaussianMechanism`` describes both, in two explicit groups (``blocks`` and
``local_blocks``), and the site charges all of them, so the accounting is one Gaussian
release of every block per query. The site drives a query as
``compute_local`` (local blocks, before noise) -> noise -> ``apply_local``
(state update) -> ``compute`` (released blocks). Every kernel has these
methods; the defaults say "no local blocks" and do nothing, so the site runs
the same steps for every kernel. A kernel that keeps a value per record
across a job's queries sets ``per_record_state``: the site then runs it on
every record (no Poisson sampling), with Gaussian noise only, on a working
copy of the job's state that it keeps only once the ledger charge commits.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, ClassVar, Self

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import RecordPart, charged_adjacencies, worst_case
from privadapt.common.kernels.exact_sum import clip_slack, conversion_error
from privadapt.common.kernels.grid_rounding import (
    COARSEST_FRACTIONAL_BITS,
    Norm,
    rounding_charged,
    score_rounding_charged,
)
from privadapt.common.mechanisms import Adjacency, Mechanism, NoNoise
from privadapt.common.mechanisms.base import (
    NoiseRequest,
    OneBlockMechanism,
    kernel_noise_class,
)
from privadapt.common.validation import check_positive, check_positive_finite, frozen_value

#: The kind of a kernel mechanism a kernel builds (``Kernel.mechanism``'s
#: ``noise``): any registered one that overrides ``KernelMechanism.for_kernel``
#: (``privadapt.common.mechanisms.base.kernel_noises``).
NoiseKind = str

#: The record count an algorithm sizes a mechanism's computation error for
#: (``Kernel.mechanism``): the same public bound a site's policy assumes when
#: it declares no ``max_records`` (client/policy.py DEFAULT_MAX_RECORDS), so
#: a site at or below it charges no more than the algorithm planned.
SIZING_RECORDS = 2**20

# Records per chunk: bounds a kernel's working memory to chunk x d doubles.
CHUNK_RECORDS = 16_384


class KernelParams(ABC):
    """The public parameters of one kernel query: frozen, valid once built."""

    @classmethod
    @abstractmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> Self:
        """Parse a query's params for records of dimension ``dim``; raise
        ``ValueError`` naming the first malformed parameter."""

    @abstractmethod
    def to_wire(self) -> dict[str, Any]:
        """The dict a coordinator sends (``from_wire`` inverts it)."""


@frozen_value
class NoParams(KernelParams):
    """The parameters of a kernel that takes none."""

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> NoParams:
        if params:
            raise ValueError(f"this kernel takes no parameters, got {sorted(params)}")
        return cls()

    def to_wire(self) -> dict[str, Any]:
        return {}


def wire_values(params: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """The ``required`` keys of a query's params, or ``ValueError`` naming a missing one."""
    for key in required:
        if key not in params:
            raise ValueError(f"missing parameter {key!r}")
    return {key: params[key] for key in required}


# Clip bounds and radii a kernel accepts: their squares, and those times any n
# below 2^53, stay far inside float range, so no bound overflows.
BOUND_RANGE = (2.0**-200, 2.0**200)


def check_bound(name: str, value: Any) -> float:
    """A clip bound or radius: finite, > 0 and within :data:`BOUND_RANGE`."""
    value = check_positive_finite(name, value)
    low, high = BOUND_RANGE
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [2^-200, 2^200], got {value!r}")
    return value


def readonly(array: np.ndarray) -> np.ndarray:
    """``array`` made immutable, so a frozen Params really is frozen."""
    array.setflags(write=False)
    return array


class Kernel(ABC):
    """A registered site-side statistic with clipping and a sensitivity bound."""

    name: ClassVar[str]
    Params: ClassVar[type[KernelParams]]
    per_record_state: ClassVar[bool] = False
    #: The kernel checks its own floating-point error a posteriori and raises
    #: ``UncertifiedComputationError`` when the check fails: the site arms a
    #: latch before it runs (client/ledger/latches.py).
    certifies_own_error: ClassVar[bool] = False

    @abstractmethod
    def output_shapes(self, params: Any, dim: int) -> tuple[tuple[int, ...], ...]:
        """Shape of each released block for records of dimension ``dim``."""

    @abstractmethod
    def l2_sensitivities(self, params: Any, adjacency: Adjacency) -> tuple[float, ...]:
        """Largest L2 change of each released block when one record changes."""

    @abstractmethod
    def compute(
        self, data: Dataset, params: Any, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        """The clipped sums over ``data``, one array per released block."""

    @abstractmethod
    def max_abs_sum(self, params: Any, num_records: int) -> float:
        """A bound on any entry of the un-noised sum (for fixed-point range checks)."""

    def clip_bounds(self, params: Any) -> dict[str, float]:
        """The data bounds this query asks the site to clip to, by policy name
        (``clip_norm``, ``label_bound``), for the site's policy to check."""
        return {}

    def work(self, params: Any, dim: int, num_records: int) -> float:
        """An estimate of the multiply-adds one query costs a site of
        ``num_records`` records (public: n under replace-one, the policy's
        bound under add/remove), from the query alone, for the site policy's
        ``max_query_work`` (client/policy.py): a coordinator must not be able
        to make one query cost a site minutes of CPU. Default, for a kernel
        that makes one pass over the records and adds each record's terms into
        its output: n (d + the output entries). Kernels whose work multiplies
        with a public parameter (iterations, candidates, public points)
        override it."""
        entries = sum(math.prod(shape) for shape in self.output_shapes(params, dim))
        return float(num_records) * (max(dim, 1) + entries)

    def computation_errors(
        self, params: Any, dim: int, max_records: int
    ) -> tuple[float, ...]:
        """Per released block, a public bound e on how far each entry of
        ``compute`` can sit from a function of the records whose sensitivity is
        the kernel's, at a site of at most ``max_records`` records
        (charged by :mod:`.grid_rounding`). Default, for a kernel that sums
        per-record terms exactly (:mod:`.exact_sum`): the one float64 rounding
        of the sum, plus a few ulps of a clipped term's norm for the float clip."""
        term = self.max_abs_sum(params, 1)
        total = self.max_abs_sum(params, max_records)
        return tuple(clip_slack(term, math.prod(shape)) + conversion_error(total)
                     for shape in self.output_shapes(params, dim))

    def sensitivities(
        self, params: Any, adjacency: Adjacency, norm: Norm, dim: int
    ) -> tuple[float, ...]:
        """Per released block sensitivity in ``norm``. L1 follows from L2 by
        ||v||_1 <= sqrt(size) ||v||_2 unless a kernel knows better."""
        l2 = self.l2_sensitivities(params, adjacency)
        if norm == "l2":
            return l2
        shapes = self.output_shapes(params, dim)
        return tuple(s * math.sqrt(math.prod(shape)) for s, shape in zip(l2, shapes, strict=True))

    def check_state(self, params: Any, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` if this query cannot run on the job's
        ``state`` (e.g. a step out of order). Reads only the query and the
        state, never the records: the site calls it before it touches them,
        so such a refusal costs no data-dependent time. Default:
        every state will do."""
        return None

    # Local blocks (module docstring): none by default.

    def local_block_shapes(self, params: Any, num_records: int) -> tuple[tuple[int, ...], ...]:
        """Shape of each local block at a site holding ``num_records`` records."""
        return ()

    def local_l2_sensitivities(self, params: Any, adjacency: Adjacency) -> tuple[float, ...]:
        """Largest L2 change of each local block when one record changes."""
        return ()

    def compute_local(
        self, data: Dataset, params: Any, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        """The local blocks before noise; may prepare ``state`` for this query."""
        return ()

    def apply_local(
        self,
        data: Dataset,
        params: Any,
        state: MutableMapping[str, Any],
        noised_blocks: tuple[np.ndarray, ...],
    ) -> None:
        """Update ``state`` from the noised local blocks."""
        return None  # no local blocks, nothing to apply

    # What a release costs, and the mechanism to ask for.

    def charged_sensitivities(
        self, params: Any, adjacency: Adjacency, norm: Norm, dim: int, fractional_bits: int,
        max_records: int = 1,
    ) -> tuple[float, ...]:
        """Every block's sensitivity as a site on the grid 2^-``fractional_bits``
        holding at most ``max_records`` records (public) charges it: released
        blocks with the kernel's computation error and their rounding
        (:mod:`.grid_rounding`), then local blocks as they are."""
        released = rounding_charged(self.sensitivities(params, adjacency, norm, dim),
                                    self.output_shapes(params, dim), norm, fractional_bits,
                                    self.computation_errors(params, dim, max_records))
        return released + self.local_l2_sensitivities(params, adjacency)

    def mechanism(
        self,
        params: Any,
        noise_multiplier: float,
        adjacency: Adjacency,
        *,
        dim: int,
        noise: NoiseKind = "gaussian",
        block_ratios: Sequence[float] | None = None,
        sampling_rate: float = 1.0,
        fractional_bits: int = COARSEST_FRACTIONAL_BITS,
        max_records: int = SIZING_RECORDS,
        records: RecordPart = RecordPart.ALL,
        honest_shares: int = 1,
    ) -> Mechanism:
        """The mechanism an algorithm asks for: each block declares the
        sensitivity the site charges on the grid 2^-``fractional_bits``
        (default the coarsest a site accepts, so it is sound for any grid) and
        gets noise ``noise_multiplier`` times that (with the kernel's
        computation error at a site of ``max_records`` records, by default
        :data:`SIZING_RECORDS`, the bound a site's policy assumes where it
        declares none: the float rounding of a sum grows with n, a site
        charges its own, and so one at or below the bound charges no more
        than the algorithm planned), times its entry of
        ``block_ratios`` (one per block, released then local; default all 1).
        ``noise`` names the mechanism (its kind), which builds itself
        (``KernelMechanism.for_kernel``): Gaussian: sigma_b = z ratio_b
        charged_b; Laplace (one block only): scale = z charged L1
        sensitivity, i.e. z = 1/epsilon; discrete Laplace (one block): the
        same in integer steps of the grid 2^-``fractional_bits``, which must
        then be the federation's own (the noise is exact only on the grid the
        value is rounded to); distributed discrete Gaussian (one block): exact
        N_Z shares on that grid whose ``honest_shares`` n = K - t sum to sigma
        = z sqrt(Q) grid steps, Q the squared charged L2 sensitivity in steps;
        ``noise_multiplier = inf``: ``NoNoise`` with the kernel's own
        sensitivities. For a query on a part of the
        records (``records``) under replace-one, every sensitivity is the
        larger of its replace-one and add/remove values, as a site charges it
        (common/data/record_parts.py)."""
        adjacency = Adjacency(adjacency)
        adjacencies = charged_adjacencies(records, adjacency)
        check_positive("noise_multiplier", noise_multiplier, infinity_means="inf for no noise")
        noise_class = kernel_noise_class(noise)
        norm: Norm = "l2" if noise_class.noise_norm == "l2" else "l1"
        if math.isinf(noise_multiplier):
            own = worst_case([self.sensitivities(params, each, norm, dim)
                              + self.local_l2_sensitivities(params, each) for each in adjacencies])
            return NoNoise(own, adjacency)
        charged = worst_case([self.charged_sensitivities(params, each, norm, dim,
                                                         fractional_bits, max_records)
                              for each in adjacencies])
        ratios = (1.0,) * len(charged) if block_ratios is None else tuple(block_ratios)
        if len(ratios) != len(charged):
            raise ValueError(f"{len(ratios)} block_ratios for the {len(charged)} blocks of "
                             f"kernel {self.name!r}")
        if issubclass(noise_class, OneBlockMechanism) and (len(charged) != 1
                                                           or self.per_record_state):
            raise ValueError(f"{noise} noise takes one released block; kernel "
                             f"{self.name!r} has {len(charged)} (or keeps per-record state)")
        return noise_class.for_kernel(NoiseRequest(
            charged, noise_multiplier, ratios, self.name, len(self.output_shapes(params, dim)),
            adjacency, sampling_rate, fractional_bits, honest_shares))

    # Selection queries: the one released block read as scores.

    def score_sensitivities(
        self, params: Any, adjacency: Adjacency, dim: int
    ) -> tuple[float, ...]:
        """Per candidate, the largest change of its score when one record
        changes, for a kernel whose one released block is a vector of K
        scores (a selection query picks an index among them). The default
        is sound for any such kernel: no entry of a vector moves by more than
        the vector's L2 norm, so each score moves by at most the block's L2
        sensitivity; a kernel that knows a tighter per-entry bound says so.
        ``ValueError`` for a kernel whose release is not one vector."""
        shapes = self.output_shapes(params, dim)
        if len(shapes) != 1 or len(shapes[0]) != 1:
            raise ValueError(f"kernel {self.name!r} releases blocks of shapes {list(shapes)}, "
                             "not one vector of scores: it cannot answer a selection")
        (l2,) = self.l2_sensitivities(params, adjacency)
        return (l2,) * shapes[0][0]

    def charged_score_sensitivities(
        self, params: Any, adjacency: Adjacency, dim: int,
        fractional_bits: int = COARSEST_FRACTIONAL_BITS, max_records: int = SIZING_RECORDS,
    ) -> tuple[float, ...]:
        """Each score's sensitivity as a site on the grid 2^-``fractional_bits``
        holding at most ``max_records`` records charges it for a selection:
        :meth:`score_sensitivities` plus the grid step, twice the kernel's
        computation error and the decoding's rounding
        (:func:`~.grid_rounding.score_rounding_charged`). The site admits a
        selection with it, and an algorithm sizes its noise with it (by
        default for the coarsest grid and :data:`SIZING_RECORDS`)."""
        (error,) = self.computation_errors(params, dim, max_records)
        return score_rounding_charged(self.score_sensitivities(params, adjacency, dim),
                                      fractional_bits, error,
                                      self.max_abs_sum(params, max_records))


_REGISTRY: dict[str, Kernel] = {}


def register(kernel: type[Kernel]) -> type[Kernel]:
    """Class decorator: make a kernel available to sites under its ``name``."""
    if kernel.name in _REGISTRY:
        raise ValueError(f"kernel {kernel.name!r} is registered twice")
    _REGISTRY[kernel.name] = kernel()
    return kernel


def get_kernel(name: str) -> Kernel:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown kernel {name!r}; registered: {sorted(_REGISTRY)}") from None


def registered_kernels() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))
