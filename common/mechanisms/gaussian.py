"""The Gaussian mechanism: blocks released as noise shares, local blocks
noised at the site, optionally on a Poisson sample of the records."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import (
    Adjacency,
    KernelMechanism,
    NoiseRequest,
    Shape,
)
from privadapt.common.noise.floating import RandomBits, gaussian_noise, gaussian_share
from privadapt.common.validation import (
    check_nonnegative_finite,
    check_positive_finite,
    frozen_value,
)

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


@frozen_value
class GaussianBlock:
    """One block of a Gaussian release: its L2 sensitivity and the standard
    deviation ``sigma`` of the *total* noise (summed over all sites' shares)."""

    sensitivity: float
    sigma: float

    def __post_init__(self) -> None:
        check_nonnegative_finite("GaussianBlock.sensitivity", self.sensitivity)
        check_positive_finite("GaussianBlock.sigma", self.sigma)


def _blocks_to_list(blocks: tuple[GaussianBlock, ...]) -> list[list[float]]:
    return [[b.sensitivity, b.sigma] for b in blocks]


def _blocks_from_list(pairs: Any) -> tuple[GaussianBlock, ...]:
    return tuple(GaussianBlock(float(s), float(g)) for s, g in pairs)


@frozen_value
class GaussianMechanism(KernelMechanism):
    """Gaussian noise on one or more blocks released together.

    A record can move every block at once, by at most its block sensitivity, so
    the release is a single Gaussian mechanism with effective noise multiplier
    ``(sum_b (sensitivity_b / sigma_b)^2)^(-1/2)`` over all blocks (the privacy
    loss depends on the L2 norm of the sensitivity vector measured in units of
    each block's sigma).

    ``blocks`` are released as distributed noise shares; ``local_blocks`` are
    noised by the site itself at the full sigma and never released
    (:mod:`privadapt.common.kernels.local_blocks`); both count in the
    accounting, as one Gaussian release of every block. A mechanism built
    before local blocks were explicit carries them as the trailing entries of
    ``blocks``; it accounts identically, and works at the site because the site
    asks :meth:`noise_shares` for the kernel's released blocks (the first ones)
    and :meth:`local_noise` for its local blocks (the last ones).

    With ``sampling_rate`` q < 1 the sum runs over a Poisson sample of the
    site's records drawn by the site (each record in with probability q,
    independently per release), the release dp-accounting describes as
    ``PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))``; the
    sensitivities stay those of one record's clipped contribution. A sampled
    release has no local blocks (their per-record state needs every record).

    Its dp-accounting event is ``GaussianDpEvent(noise_multiplier)``, or
    ``PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))`` when
    sampled: the effective multiplier over every block, sigma / sensitivity
    (the sensitivity convention of :mod:`.base`).
    """

    blocks: tuple[GaussianBlock, ...]
    adjacency: Adjacency = Adjacency.REPLACE_ONE
    sampling_rate: float = 1.0
    local_blocks: tuple[GaussianBlock, ...] = ()

    kinds: ClassVar[tuple[str, ...]] = ("gaussian", "poisson_sampled_gaussian")

    def __post_init__(self) -> None:
        if not self.blocks:
            raise ValueError("GaussianMechanism needs at least one block")
        self.blocks = tuple(self.blocks)
        self.local_blocks = tuple(self.local_blocks)
        self.adjacency = Adjacency(self.adjacency)
        check_positive_finite("GaussianMechanism.sampling_rate", self.sampling_rate)
        if self.sampling_rate > 1:
            raise ValueError(
                f"GaussianMechanism.sampling_rate is a probability in (0, 1], "
                f"got {self.sampling_rate!r}"
            )
        self.sampling_rate = float(self.sampling_rate)
        if self.is_sampled and self.adjacency != Adjacency.ADD_REMOVE_ONE:
            raise ValueError(
                "a Poisson-sampled Gaussian release is accounted under add/remove "
                f"adjacency only, got {self.adjacency}: declare its add/remove "
                "sensitivities (one record's clipped contribution)"
            )
        if self.is_sampled and self.local_blocks:
            raise ValueError("a Poisson-sampled Gaussian release cannot carry local blocks: "
                             "a kernel with local blocks runs on every record")

    @classmethod
    def single(
        cls,
        sensitivity: float,
        noise_multiplier: float,
        adjacency: Adjacency = Adjacency.REPLACE_ONE,
        sampling_rate: float = 1.0,
    ) -> GaussianMechanism:
        """One block whose sigma is ``noise_multiplier * sensitivity``."""
        check_positive_finite("noise_multiplier", noise_multiplier)
        check_positive_finite("sensitivity", sensitivity)
        block = GaussianBlock(sensitivity, noise_multiplier * sensitivity)
        return cls((block,), adjacency, sampling_rate)

    @classmethod
    def for_kernel(cls, request: NoiseRequest) -> GaussianMechanism:
        """sigma_b = z ratio_b charged_b on every block, released then local."""
        if 0.0 in request.charged:
            raise ValueError(f"kernel {request.kernel!r} has a block of sensitivity 0 under "
                             f"{request.adjacency}: Gaussian noise on it is meaningless; ask for "
                             "NoNoise")
        z = request.noise_multiplier
        blocks = tuple(GaussianBlock(s, z * k * s)
                       for s, k in zip(request.charged, request.ratios, strict=True))
        return cls(blocks[:request.released], request.adjacency, request.sampling_rate,
                   blocks[request.released:])

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "poisson_sampled_gaussian" if self.is_sampled else "gaussian"

    def _dp_event(self) -> DpEvent:
        from dp_accounting import dp_event

        event = dp_event.GaussianDpEvent(self.noise_multiplier)
        return dp_event.PoissonSampledDpEvent(self.sampling_rate, event) if self.is_sampled \
            else event

    @property
    def composes_as_gaussian(self) -> bool:  # type: ignore[override]
        return not self.is_sampled

    @property
    def all_blocks(self) -> tuple[GaussianBlock, ...]:
        """Released blocks, then local blocks."""
        return self.blocks + self.local_blocks

    @property
    def sensitivities(self) -> tuple[float, ...]:
        return tuple(b.sensitivity for b in self.all_blocks)

    @property
    def noise_scales(self) -> tuple[float, ...]:
        return tuple(b.sigma for b in self.blocks)

    @property
    def noise_multiplier(self) -> float:
        # hypot: no overflow for tiny sigmas (the multiplier is then just 0).
        ratio = math.hypot(*(b.sensitivity / b.sigma for b in self.all_blocks))
        return math.inf if ratio == 0 else 1.0 / ratio

    @property
    def summary(self) -> str:
        count = len(self.all_blocks)
        # A sampled release costs far less than its z alone says: name q too.
        sampled = f"poisson-sampled gaussian q={self.sampling_rate:.3g} " if self.is_sampled \
            else "gaussian "
        return f"{sampled}z={self.noise_multiplier:.3g} ({count} block{'s' * (count > 1)})"

    def with_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency
    ) -> GaussianMechanism:
        every = self.all_blocks
        if len(sensitivities) != len(every):
            raise ValueError(
                f"{len(sensitivities)} sensitivities for {len(every)} Gaussian blocks"
            )
        blocks = tuple(GaussianBlock(s, b.sigma) for s, b in zip(sensitivities, every, strict=True))
        released = len(self.blocks)
        return GaussianMechanism(blocks[:released], adjacency, self.sampling_rate,
                                 blocks[released:])

    def noise_shares(
        self,
        shapes: Sequence[Shape],
        num_sites: int,
        collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> tuple[np.ndarray, ...]:
        if len(shapes) > len(self.blocks):
            raise ValueError(f"{len(shapes)} released blocks for {len(self.blocks)} "
                             "Gaussian blocks")
        return tuple(
            gaussian_share(b.sigma, num_sites, collusion_tolerance, shape, source)
            for shape, b in zip(shapes, self.blocks, strict=False)
        )

    def local_noise(
        self, shapes: Sequence[Shape], source: RandomBits | None = None
    ) -> tuple[np.ndarray, ...]:
        every = self.all_blocks
        if len(shapes) > len(every):
            raise ValueError(f"{len(shapes)} local blocks for {len(every)} Gaussian blocks")
        local = every[len(every) - len(shapes):]
        return tuple(
            gaussian_noise(b.sigma, shape, source) for shape, b in zip(shapes, local, strict=True)
        )

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"blocks": _blocks_to_list(self.blocks)}
        if self.local_blocks:
            out["local_blocks"] = _blocks_to_list(self.local_blocks)
        if self.is_sampled:
            out["sampling_rate"] = self.sampling_rate
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GaussianMechanism:
        kind, adjacency = data["kind"], Adjacency(data["adjacency"])
        sampling_rate = 1.0
        if kind == "poisson_sampled_gaussian":
            sampling_rate = float(data["sampling_rate"])
            if not sampling_rate < 1:
                raise ValueError(f"a {kind} needs sampling_rate < 1, got {sampling_rate!r}")
        return cls(_blocks_from_list(data["blocks"]), adjacency, sampling_rate,
                   _blocks_from_list(data.get("local_blocks", ())))
