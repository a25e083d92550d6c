"""Privacy mechanisms as data, in the spirit of dp-accounting's ``DpEvent``.

A mechanism is a small frozen value that says *how* a sum over records is
privatised. The same object drives noise generation at the site
(:mod:`privadapt.common.noise`) and accounting in every ledger
(:mod:`privadapt.common.accounting`); nothing here knows how epsilon is computed.

Every mechanism states its adjacency (DESIGN.md section 2): the sensitivities
it declares are the largest change of the released sum when one record is
replaced (``REPLACE_ONE``) or added/removed (``ADD_REMOVE_ONE``).

Mechanisms serialise to plain JSON-compatible dicts (``to_dict``/``mechanism_from_dict``)
so a ledger can store them and any accountant can replay them later.

Poisson subsampling (dp-accounting's ``PoissonSampledDpEvent``) is a field of
the Gaussian mechanism, ``sampling_rate`` q: the site includes each of its
records independently with probability q, secretly, and releases the noised
sum over that sample. It stays one mechanism with one code path at the site;
only the accountant reads q. Amplification by Poisson sampling is stated under
add/remove adjacency (Abadi et al. 2016; Mironov, Talwar and Zhang 2019, "Renyi
differential privacy of the sampled Gaussian mechanism"), so a sampled
mechanism must be ``ADD_REMOVE_ONE`` (see :mod:`privadapt.common.accounting`).
A sampled Gaussian serialises under its own kind, ``poisson_sampled_gaussian``,
so that a reader that does not know sampling (an older site, a wire format
without the rate) refuses it instead of silently reading an unsampled release;
an unsampled one keeps kind ``gaussian`` and the exact dict it always had.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias


class Adjacency(StrEnum):
    """Which datasets count as neighbours: the unit a guarantee protects."""

    REPLACE_ONE = "replace_one"
    ADD_REMOVE_ONE = "add_remove_one"


def _check_positive(name: str, value: float, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and ok):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True)
class GaussianBlock:
    """One block of a Gaussian release: its L2 sensitivity and the standard
    deviation ``sigma`` of the *total* noise (summed over all sites' shares)."""

    sensitivity: float
    sigma: float

    def __post_init__(self) -> None:
        _check_positive("GaussianBlock.sensitivity", self.sensitivity, allow_zero=True)
        _check_positive("GaussianBlock.sigma", self.sigma)


@dataclass(frozen=True)
class GaussianMechanism:
    """Gaussian noise on one or more blocks released together.

    A record can move every block at once, by at most its block sensitivity, so
    the release is a single Gaussian mechanism with effective noise multiplier
    ``(sum_b (sensitivity_b / sigma_b)^2)^(-1/2)`` (the privacy loss depends on
    the L2 norm of the sensitivity vector measured in units of each block's sigma).

    With ``sampling_rate`` q < 1 the sum runs over a Poisson sample of the
    site's records drawn by the site (each record in with probability q,
    independently per release), the release dp-accounting describes as
    ``PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))``; the
    sensitivities stay those of one record's clipped contribution.
    """

    blocks: tuple[GaussianBlock, ...]
    adjacency: Adjacency = Adjacency.REPLACE_ONE
    sampling_rate: float = 1.0

    def __post_init__(self) -> None:
        if not self.blocks:
            raise ValueError("GaussianMechanism needs at least one block")
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))
        _check_positive("GaussianMechanism.sampling_rate", self.sampling_rate)
        if self.sampling_rate > 1:
            raise ValueError(
                f"GaussianMechanism.sampling_rate is a probability in (0, 1], "
                f"got {self.sampling_rate!r}"
            )
        object.__setattr__(self, "sampling_rate", float(self.sampling_rate))
        if self.is_sampled and self.adjacency != Adjacency.ADD_REMOVE_ONE:
            raise ValueError(
                "a Poisson-sampled Gaussian release is accounted under add/remove "
                f"adjacency only, got {self.adjacency}: declare its add/remove "
                "sensitivities (one record's clipped contribution)"
            )

    @classmethod
    def single(
        cls,
        sensitivity: float,
        noise_multiplier: float,
        adjacency: Adjacency = Adjacency.REPLACE_ONE,
        sampling_rate: float = 1.0,
    ) -> GaussianMechanism:
        """One block whose sigma is ``noise_multiplier * sensitivity``."""
        _check_positive("noise_multiplier", noise_multiplier)
        _check_positive("sensitivity", sensitivity)
        block = GaussianBlock(sensitivity, noise_multiplier * sensitivity)
        return cls((block,), adjacency, sampling_rate)

    @property
    def is_sampled(self) -> bool:
        """True when the release runs on a Poisson sample (q < 1)."""
        return self.sampling_rate < 1.0

    @property
    def noise_multiplier(self) -> float:
        # hypot: no overflow for tiny sigmas (the multiplier is then just 0).
        ratio = math.hypot(*(b.sensitivity / b.sigma for b in self.blocks))
        return math.inf if ratio == 0 else 1.0 / ratio

    def with_sensitivities(
        self, sensitivities: tuple[float, ...], adjacency: Adjacency
    ) -> GaussianMechanism:
        """The same noise and sampling, accounted with other sensitivities (the
        site's own, under the adjacency its cap is stated in)."""
        if len(sensitivities) != len(self.blocks):
            raise ValueError(
                f"{len(sensitivities)} sensitivities for {len(self.blocks)} Gaussian blocks"
            )
        blocks = tuple(
            GaussianBlock(s, b.sigma) for s, b in zip(sensitivities, self.blocks, strict=True)
        )
        return GaussianMechanism(blocks, adjacency, self.sampling_rate)


@dataclass(frozen=True)
class LaplaceMechanism:
    """Laplace noise of ``scale`` b on a release of L1 ``sensitivity``: pure
    epsilon = sensitivity / scale."""

    sensitivity: float
    scale: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    def __post_init__(self) -> None:
        _check_positive("LaplaceMechanism.sensitivity", self.sensitivity, allow_zero=True)
        _check_positive("LaplaceMechanism.scale", self.scale)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale

    def with_sensitivities(
        self, sensitivities: tuple[float, ...], adjacency: Adjacency
    ) -> LaplaceMechanism:
        (sensitivity,) = sensitivities
        return LaplaceMechanism(sensitivity, self.scale, adjacency)


@dataclass(frozen=True)
class PureDpEvent:
    """A mechanism accounted as pure epsilon-DP (e.g. an exponential mechanism
    run entirely at one site)."""

    epsilon: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    def __post_init__(self) -> None:
        _check_positive("PureDpEvent.epsilon", self.epsilon, allow_zero=True)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))


@dataclass(frozen=True)
class ZCdpEvent:
    """A mechanism accounted by rho-zero-concentrated DP (Bun and Steinke 2016)."""

    rho: float
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    def __post_init__(self) -> None:
        _check_positive("ZCdpEvent.rho", self.rho, allow_zero=True)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))


@dataclass(frozen=True)
class NoNoise:
    """Release without noise. Private (epsilon 0) only when every declared
    sensitivity is 0 (e.g. a site's record count under replace-one adjacency,
    where site sizes are public); otherwise it is a non-private release that only
    a site whose policy allows it (test and simulation mode) will answer."""

    sensitivities: tuple[float, ...] = (0.0,)
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivities", tuple(float(s) for s in self.sensitivities))
        for s in self.sensitivities:
            _check_positive("NoNoise.sensitivities", s, allow_zero=True)
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

    @property
    def is_private(self) -> bool:
        return all(s == 0 for s in self.sensitivities)

    def with_sensitivities(self, sensitivities: tuple[float, ...], adjacency: Adjacency) -> NoNoise:
        return NoNoise(tuple(sensitivities), adjacency)


Mechanism: TypeAlias = GaussianMechanism | LaplaceMechanism | PureDpEvent | ZCdpEvent | NoNoise

_KINDS: dict[str, type] = {
    "gaussian": GaussianMechanism,
    "laplace": LaplaceMechanism,
    "pure_dp": PureDpEvent,
    "zcdp": ZCdpEvent,
    "no_noise": NoNoise,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}
_SAMPLED_GAUSSIAN = "poisson_sampled_gaussian"


def declared_sensitivities(mechanism: Mechanism) -> tuple[float, ...]:
    """The per-block sensitivities a noise-adding mechanism declares."""
    if isinstance(mechanism, GaussianMechanism):
        return tuple(b.sensitivity for b in mechanism.blocks)
    if isinstance(mechanism, LaplaceMechanism):
        return (mechanism.sensitivity,)
    if isinstance(mechanism, NoNoise):
        return mechanism.sensitivities
    raise TypeError(f"{type(mechanism).__name__} adds no noise of its own and has no blocks")


def mechanism_to_dict(mechanism: Mechanism) -> dict[str, Any]:
    """A JSON-compatible description that :func:`mechanism_from_dict` inverts."""
    kind = _KIND_OF.get(type(mechanism))
    if kind is None:
        raise TypeError(f"not a privadapt mechanism: {mechanism!r}")
    if isinstance(mechanism, GaussianMechanism) and mechanism.is_sampled:
        kind = _SAMPLED_GAUSSIAN
    out: dict[str, Any] = {"kind": kind, "adjacency": str(mechanism.adjacency)}
    if isinstance(mechanism, GaussianMechanism):
        out["blocks"] = [[b.sensitivity, b.sigma] for b in mechanism.blocks]
        if mechanism.is_sampled:
            out["sampling_rate"] = mechanism.sampling_rate
    elif isinstance(mechanism, LaplaceMechanism):
        out.update(sensitivity=mechanism.sensitivity, scale=mechanism.scale)
    elif isinstance(mechanism, PureDpEvent):
        out["epsilon"] = mechanism.epsilon
    elif isinstance(mechanism, ZCdpEvent):
        out["rho"] = mechanism.rho
    else:
        out["sensitivities"] = list(mechanism.sensitivities)
    return out


def mechanism_from_dict(data: dict[str, Any]) -> Mechanism:
    """Rebuild a mechanism from :func:`mechanism_to_dict`'s output; raises
    ``ValueError`` for an unknown kind or a malformed field."""
    try:
        kind = data["kind"]
        adjacency = Adjacency(data["adjacency"])
        if kind in ("gaussian", _SAMPLED_GAUSSIAN):
            blocks = tuple(GaussianBlock(float(s), float(g)) for s, g in data["blocks"])
            if kind == "gaussian":
                return GaussianMechanism(blocks, adjacency)
            sampling_rate = float(data["sampling_rate"])
            if not sampling_rate < 1:
                raise ValueError(f"a {kind} needs sampling_rate < 1, got {sampling_rate!r}")
            return GaussianMechanism(blocks, adjacency, sampling_rate)
        if kind == "laplace":
            return LaplaceMechanism(float(data["sensitivity"]), float(data["scale"]), adjacency)
        if kind == "pure_dp":
            return PureDpEvent(float(data["epsilon"]), adjacency)
        if kind == "zcdp":
            return ZCdpEvent(float(data["rho"]), adjacency)
        if kind == "no_noise":
            return NoNoise(tuple(float(s) for s in data["sensitivities"]), adjacency)
    except (KeyError, TypeError) as err:
        raise ValueError(f"malformed mechanism description {data!r}: {err}") from err
    known = sorted([*_KINDS, _SAMPLED_GAUSSIAN])
    raise ValueError(f"unknown mechanism kind {data.get('kind')!r}; known: {known}")
