"""What every mechanism knows about itself: the base classes, and the one
registry of mechanism kinds.

:class:`Mechanism` is the interface every accountant reads (kind, adjacency,
free or not private, pure epsilon, how it reads under another adjacency, its
dict form, its dp-accounting event); :class:`KernelMechanism` adds what a site
needs to release a kernel's sums with it (sensitivities per block, the norm
they are in, noise scales, noise shares and local-block noise) and how a
kernel builds it from a noise multiplier; :class:`OneBlockMechanism` is a
kernel mechanism of one released block and no local blocks. Selection
mechanisms, which release an index instead of a sum, have their own base
class (:class:`privadapt.common.mechanisms.selection.SelectionMechanism`).
See the package docstring.

**The registry.** A concrete mechanism class declares its serialised ``kind``
(or ``kinds``, when one class writes several) and is registered by that
declaration alone (:meth:`Mechanism.__init_subclass__`): the dict form, the
wire, a ledger and :meth:`Kernel.mechanism
<privadapt.common.kernels.base.Kernel.mechanism>` all find it in
:data:`MECHANISM_KINDS`; its accountant case is the one its ``accounted_as``
names (:mod:`privadapt.common.accounting.cases`).

**Sensitivity convention and dp-accounting events.** A mechanism's declared
sensitivity is the largest change of the released value between neighbours
under its *own* adjacency: the whole shift of the output. Its noise
multiplier is its noise over that sensitivity (sigma / sensitivity for a
Gaussian, scale / sensitivity for a Laplace). :meth:`Mechanism.to_dp_event`
states the release in dp-accounting's vocabulary under the same convention,
which is dp-accounting's ``NeighboringRelation.ADD_OR_REMOVE_ONE`` reading (an
event of noise multiplier z moves the output by one unit of noise z), so the
event's noise multiplier *is* the mechanism's, sigma / sensitivity, whatever
the mechanism's own adjacency. A replay expresses every mechanism in the
ledger's adjacency first (:meth:`Mechanism.in_adjacency`) and composes the
events under ``ADD_OR_REMOVE_ONE``; never under dp-accounting's
``REPLACE_ONE``, where the unit is one record's contribution and a Gaussian's
PLD (not its RDP) shifts by twice it (google/differential-privacy#378).
Pure epsilon-DP releases are the exception: their event is randomized
response over two buckets, the tight epsilon-DP pair, which dp-accounting
reads under ``REPLACE_ONE`` only, so a ledger mixing them with shift events
has no single dp-accounting replay (its accountants report them unsupported).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privadapt.common.noise.floating import RandomBits, SecureRandomBits

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent

Shape = tuple[int, ...]

#: Serialised kind -> class: the one table every dict and wire form goes
#: through, filled by the classes themselves (:meth:`Mechanism.__init_subclass__`).
MECHANISM_KINDS: dict[str, type[Mechanism]] = {}


class Adjacency(StrEnum):
    """Which datasets count as neighbours: the unit a guarantee protects."""

    REPLACE_ONE = "replace_one"
    ADD_REMOVE_ONE = "add_remove_one"


class Mechanism:
    """What every mechanism knows about itself. Subclasses are frozen
    dataclasses with an ``adjacency`` field; a concrete one declares its
    serialised ``kind`` (or ``kinds``) and is registered under it."""

    kind: ClassVar[str]
    #: Every kind the class reads and writes (default: its one ``kind``).
    kinds: ClassVar[tuple[str, ...]]
    adjacency: Adjacency
    #: Can a kernel's sum be released with it (False: an accounting-only event).
    releases_kernel_sums: ClassVar[bool] = False
    #: Does it release only the index of a winning candidate (a selection
    #: mechanism, :mod:`privadapt.common.mechanisms.selection`), never a value.
    releases_index: ClassVar[bool] = False
    #: Poisson sampling rate q of the release (1: every record).
    sampling_rate: ClassVar[float] = 1.0
    #: Is its privacy loss exactly one Gaussian's, of ``noise_multiplier``, so
    #: that compositions of it fold in closed form.
    composes_as_gaussian: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a class that declares its ``kind`` or ``kinds``: the only
        step that makes a new mechanism known to the dict form and the wire."""
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "kinds" not in own and isinstance(own.get("kind"), str):
            cls.kinds = (own["kind"],)
        if "kinds" not in vars(cls):
            return  # an abstract family (KernelMechanism, SelectionMechanism)
        # A new kind may take the accountant case of an abstract family (every
        # selection is "pure_dp") but not that of another kind: a subclass of
        # the exponential mechanism inheriting "bounded_range" would be charged
        # by a bound nobody proved for it.
        definer = next(k for k in cls.__mro__ if "accounted_as" in vars(k))
        if definer is not cls and "kinds" in vars(definer):
            raise TypeError(f"{cls.__name__} declares the new kind(s) {cls.kinds} but inherits "
                            f"the accountant case of {definer.__name__}: define accounted_as "
                            "on the class")
        clashes = [kind for kind in cls.kinds
                   if MECHANISM_KINDS.get(kind, cls) is not cls]
        if clashes:  # refused before any kind is registered, so none is left half-declared
            raise TypeError(f"mechanism kind {clashes[0]!r} is declared by both "
                            f"{MECHANISM_KINDS[clashes[0]].__name__} and {cls.__name__}")
        for kind in cls.kinds:
            MECHANISM_KINDS[kind] = cls

    @property
    def accounted_as(self) -> str:
        """The accountant case that reads it
        (:mod:`privadapt.common.accounting.cases`): its own kind, unless it is
        accounted as a family it belongs to ("pure_dp": an epsilon-DP release,
        accounted as the tight epsilon-DP pair; "bounded_range": an
        epsilon-bounded-range one)."""
        return self.kind

    def to_dp_event(self) -> DpEvent:
        """The release as dp-accounting's own event, under the sensitivity
        convention of the module docstring (its noise multiplier is this
        mechanism's sigma / sensitivity; replayed under ``ADD_OR_REMOVE_ONE``
        once in the ledger's adjacency). ``NoOpDpEvent`` when it is free,
        ``NonPrivateDpEvent`` when it is not private. dp-accounting is
        imported here, not at module import: a site never needs it."""
        from dp_accounting import dp_event

        if self.is_non_private:
            return dp_event.NonPrivateDpEvent()
        if self.is_free:
            return dp_event.NoOpDpEvent()
        return self._dp_event()

    def _dp_event(self) -> DpEvent:
        """The event of a release that costs something and is private."""
        raise NotImplementedError

    @property
    def is_sampled(self) -> bool:
        """True when the release runs on a Poisson sample (q < 1)."""
        return self.sampling_rate < 1.0

    @property
    def is_free(self) -> bool:
        """True when it costs no privacy at all (epsilon 0 at every delta)."""
        raise NotImplementedError

    @property
    def is_non_private(self) -> bool:
        """True when no (epsilon, delta) with finite epsilon covers it."""
        return False

    @property
    def pure_epsilon(self) -> float:
        """Its epsilon at delta = 0 (inf unless it is pure DP)."""
        return 0.0 if self.is_free else math.inf

    @property
    def summary(self) -> str:
        """A short human description, e.g. ``laplace eps=0.5``."""
        raise NotImplementedError

    @property
    def noise_grid_bits(self) -> int | None:
        """The grid 2^-f it randomises exactly on, in integer steps (a discrete
        mechanism), which must be the query's own grid; None for float noise,
        which the site rounds onto whatever grid the query uses."""
        return None

    def in_adjacency(self, adjacency: Adjacency) -> Mechanism:
        """The same mechanism, accounted under ``adjacency``.

        Replacing a record is removing it and adding another, so an add/remove
        guarantee converts to replace-one by the triangle inequality
        (sensitivity doubles) or by group privacy of size 2 (epsilon doubles,
        rho quadruples). The converse does not hold in general and raises
        ``ValueError``: a site that accounts under add/remove must compute the
        kernel's sensitivity itself. A Poisson-sampled release stays under
        add/remove: amplification by sampling has no sound replace-one form
        here (see :mod:`privadapt.common.accounting.accountant`).
        """
        adjacency = Adjacency(adjacency)
        if self.adjacency == adjacency:
            return self
        if self.is_sampled:
            raise ValueError(
                f"a Poisson-sampled {self.kind} release (sampling rate "
                f"{self.sampling_rate:g}) is accounted under add/remove adjacency only and "
                f"cannot be accounted under {adjacency}: amplification by sampling has no "
                "sound replace-one form here"
            )
        if adjacency != Adjacency.REPLACE_ONE:
            raise ValueError(
                f"a {self.adjacency} mechanism cannot be accounted under {adjacency}: "
                "recompute its sensitivity under that adjacency instead"
            )
        return self._as_replace_one()

    def _as_replace_one(self) -> Mechanism:
        """This add/remove mechanism under replace-one adjacency."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The JSON-compatible description :func:`mechanism_from_dict` inverts."""
        return {"kind": self.kind, "adjacency": str(self.adjacency), **self._fields()}

    def _fields(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mechanism:
        """Rebuild from :meth:`to_dict`'s output (KeyError/TypeError/ValueError
        when malformed; :func:`mechanism_from_dict` says which)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class NoiseRequest:
    """What :meth:`Kernel.mechanism <privadapt.common.kernels.base.Kernel.mechanism>`
    asks a kernel mechanism class for: block b of charged sensitivity
    ``charged[b]`` (the first ``released`` released, the rest local) with
    noise ``noise_multiplier * ratios[b]`` times it, under ``adjacency``; the
    Poisson ``sampling_rate``, the grid 2^-``fractional_bits`` and the
    ``honest_shares`` are for the mechanisms that use them."""

    charged: tuple[float, ...]
    noise_multiplier: float
    ratios: tuple[float, ...]
    kernel: str
    released: int
    adjacency: Adjacency
    sampling_rate: float
    fractional_bits: int
    honest_shares: int


class KernelMechanism(Mechanism):
    """A mechanism a site applies to a kernel's released sums: one declared
    sensitivity per block (in the norm ``noise_norm``), and the noise it adds."""

    releases_kernel_sums: ClassVar[bool] = True
    #: The norm a kernel's sensitivity must be measured in for this noise.
    noise_norm: ClassVar[str] = "l2"
    #: Can it noise a kernel's local blocks (client/site.py, kernels/local_blocks.py).
    supports_local_blocks: ClassVar[bool] = True

    @property
    def sensitivities(self) -> tuple[float, ...]:
        """The declared sensitivity of every block, released then local."""
        raise NotImplementedError

    @property
    def noise_scales(self) -> tuple[float, ...]:
        """Per released block, the standard deviation (Gaussian) or scale
        (Laplace) of its total noise; 0 without noise."""
        raise NotImplementedError

    @property
    def noise_multiplier(self) -> float:
        """Effective noise over sensitivity of the whole release (inf when it
        needs no noise; 0 for a release with sensitivity but no noise)."""
        raise NotImplementedError

    @property
    def is_free(self) -> bool:
        return math.isinf(self.noise_multiplier)

    @classmethod
    def for_kernel(cls, request: NoiseRequest) -> KernelMechanism:
        """The mechanism :meth:`Kernel.mechanism
        <privadapt.common.kernels.base.Kernel.mechanism>` builds for
        ``noise=cls.kinds[0]`` (:class:`NoiseRequest`). A class that does not
        override it is no noise a kernel can be asked for."""
        raise ValueError(f"{cls.__name__} is not a noise a kernel builds")

    def with_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency
    ) -> KernelMechanism:
        """The same noise (and sampling), accounted with other sensitivities
        (the site's own, under the adjacency its cap is stated in); released
        blocks' first, then local blocks'."""
        raise NotImplementedError

    def _as_replace_one(self) -> KernelMechanism:
        return self.with_sensitivities(tuple(2 * s for s in self.sensitivities),
                                       Adjacency.REPLACE_ONE)

    def check_sharing(self, num_sites: int, collusion_tolerance: int) -> None:
        """Raise ``ValueError`` when this noise cannot be split into
        ``num_sites`` shares tolerating ``collusion_tolerance`` colluders
        (a site refuses the query before reading any record). Every split
        works for noise whose shares are sized by K - t at the site; a
        mechanism charged for a fixed number of honest shares overrides it."""

    def noise_shares(
        self,
        shapes: Sequence[Shape],
        num_sites: int,
        collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> tuple[np.ndarray, ...]:
        """One site's share of the noise of each released block of ``shapes``,
        sized so that any K - t honest shares carry the whole noise
        (:mod:`privadapt.common.noise.floating`)."""
        raise NotImplementedError

    def local_noise(
        self, shapes: Sequence[Shape], source: RandomBits | None = None
    ) -> tuple[np.ndarray, ...]:
        """The full noise of each local block of ``shapes`` (nobody else adds
        noise to them); ``()`` for no local blocks."""
        raise NotImplementedError


def kernel_noise_class(noise: str) -> type[KernelMechanism]:
    """The kernel mechanism ``Kernel.mechanism(noise=...)`` builds, by its
    kind, or ``ValueError`` naming the kinds a kernel can be asked for."""
    noises = kernel_noises()
    if noise not in noises:
        raise ValueError(f"noise must be one of {sorted(noises)}, got {noise!r}")
    return noises[noise]


def kernel_noises() -> dict[str, type[KernelMechanism]]:
    """Every registered kernel mechanism that a kernel builds from a noise
    multiplier (it overrides :meth:`KernelMechanism.for_kernel`), by its
    first kind (``gaussian`` for the Gaussian, sampled or not)."""
    return {cls.kinds[0]: cls for cls in MECHANISM_KINDS.values()
            if issubclass(cls, KernelMechanism) and "for_kernel" in vars(cls)}


class OneBlockMechanism(KernelMechanism):
    """A kernel mechanism of one released block of declared ``sensitivity``
    and no local blocks (Laplace, and the exact integer noises): subclasses
    are frozen dataclasses with ``sensitivity`` and ``adjacency`` fields."""

    sensitivity: float
    supports_local_blocks: ClassVar[bool] = False

    @property
    def sensitivities(self) -> tuple[float, ...]:
        return (self.sensitivity,)

    def with_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency
    ) -> OneBlockMechanism:
        (sensitivity,) = sensitivities
        return dataclasses.replace(self, sensitivity=sensitivity,  # type: ignore[type-var]
                                   adjacency=adjacency)

    def local_noise(
        self, shapes: Sequence[Shape], source: RandomBits | None = None
    ) -> tuple[np.ndarray, ...]:
        if shapes:
            raise ValueError(f"a {self.kind} mechanism has no local blocks: a kernel with "
                             "local blocks takes Gaussian noise only")
        return ()


class GridNoiseMechanism(OneBlockMechanism):
    """A one-block mechanism whose noise is exact integers of the grid
    2^-``fractional_bits`` (the query's own grid: ``noise_grid_bits``)."""

    fractional_bits: int

    @property
    def noise_grid_bits(self) -> int:
        return self.fractional_bits

    def noise_steps(
        self, shape: Shape, num_sites: int, collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> np.ndarray:
        """One site's int64 share of the noise of a block of ``shape``, in grid steps."""
        raise NotImplementedError

    def noise_shares(
        self,
        shapes: Sequence[Shape],
        num_sites: int,
        collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> tuple[np.ndarray, ...]:
        """Shares as floats that are exactly integers times 2^-f, so the
        codec's rint(share 2^f) gives the integers back."""
        source = source or SecureRandomBits()
        out = []
        for shape in shapes:
            steps = self.noise_steps(shape, num_sites, collusion_tolerance, source)
            if steps.size and int(np.max(np.abs(steps))) >= 2**53:  # probability exp(-256)
                raise OverflowError(f"a {self.kind} sample left the exact float range")
            out.append(np.ldexp(steps.astype(np.float64), -self.fractional_bits))
        return tuple(out)


def pure_dp_event(epsilon: float) -> DpEvent:
    """dp-accounting's event for a release known only to be pure
    ``epsilon``-DP: randomized response over two buckets, the tight
    epsilon-DP pair (its loss is +-epsilon), with noise parameter
    p = 2 / (1 + e^epsilon) rounded down (a hair more loss, never less). It is
    what the ledger's pure-DP PLD builds; dp-accounting reads it under
    ``REPLACE_ONE`` only (module docstring)."""
    from dp_accounting import dp_event

    tail = math.exp(-epsilon)
    noise = math.nextafter(2.0 * tail / (1.0 + tail), 0.0)
    return dp_event.RandomizedResponseDpEvent(noise_parameter=noise, num_buckets=2)
