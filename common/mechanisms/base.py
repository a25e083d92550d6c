"""What every mechanism knows about itself: the two base classes.

:class:`Mechanism` is the interface every accountant reads (kind, adjacency,
free or not private, pure epsilon, how it reads under another adjacency, its
dict form); :class:`KernelMechanism` adds what a site needs to release a
kernel's sums with it (sensitivities per block, the norm they are in, noise
scales, noise shares and local-block noise). Selection mechanisms, which
release an index instead of a sum, have their own base class
(:class:`privadapt.common.mechanisms.selection.SelectionMechanism`). See the
package docstring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np

from privadapt.common.noise.floating import RandomBits

Shape = tuple[int, ...]


class Adjacency(StrEnum):
    """Which datasets count as neighbours: the unit a guarantee protects."""

    REPLACE_ONE = "replace_one"
    ADD_REMOVE_ONE = "add_remove_one"


class Mechanism:
    """What every mechanism knows about itself. Subclasses are frozen
    dataclasses with an ``adjacency`` field; the kind table maps their
    serialised ``kind`` back to them."""

    kind: ClassVar[str]
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
