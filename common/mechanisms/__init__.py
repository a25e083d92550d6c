"""Privacy mechanisms as data, in the spirit of dp-accounting's ``DpEvent``.

A mechanism is a small frozen value that says *how* a sum over records is
privatised. It knows everything that follows from its own fields -- its
sensitivities and noise scales, whether it is free or not private at all, how it
reads under another adjacency, the noise share a site adds for it -- so no
caller needs to ask which class it is. How epsilon is computed from it is the
accountant's business (:mod:`privadapt.common.accounting.accountant`), not the mechanism's.

Every mechanism states its adjacency (DESIGN.md section 2): the sensitivities
it declares are the largest change of the released sum when one record is
replaced (``REPLACE_ONE``) or added/removed (``ADD_REMOVE_ONE``).

Three families. *Kernel mechanisms* (:class:`GaussianMechanism`,
:class:`LaplaceMechanism`, :class:`DiscreteLaplaceMechanism`,
:class:`DistributedDiscreteGaussianMechanism`, :class:`NoNoise`;
``releases_kernel_sums``) describe noise a site adds to a kernel's sums (the
discrete ones exact integers on the fixed-point grid). *Selection mechanisms*
(:class:`ReportNoisyMin`, :class:`DiscreteReportNoisyMin`, :class:`ExponentialMechanism`,
:class:`DiscreteExponentialMechanism`, :class:`GeneralizedExponentialMechanism`;
``releases_index``) describe how a
site that holds all of a job's data picks a candidate from a kernel's score
vector and releases only its index (:mod:`.selection`). *Events*
(:class:`PureDpEvent`, :class:`ZCdpEvent`) only describe a privacy cost for the
accountant.

Mechanisms serialise to plain JSON-compatible dicts (:func:`mechanism_to_dict`,
:func:`mechanism_from_dict`) through one kind table, :data:`MECHANISM_KINDS`, so
a ledger can store them and any accountant can replay them later; each also
states itself as dp-accounting's own event (``to_dp_event``; the sensitivity
convention is in :mod:`.base`).

A new mechanism is its class, its accountant case and its proto message: the
class, in a module of this package, declares its ``kind`` and is registered
by that (:mod:`.base`; every module here is imported below, so nothing else
lists it); its ``accounted_as`` names its case in
:mod:`privadapt.common.accounting.cases` (a new case only for new
accounting); and the wire carries it as the ``Mechanism.kind`` oneof field of
that name (``proto/privadapt/v1/federation.proto``), filled from its dict form.

Poisson subsampling (dp-accounting's ``PoissonSampledDpEvent``) is a field of
the Gaussian mechanism, ``sampling_rate`` q: the site includes each of its
records independently with probability q, secretly, and releases the noised
sum over that sample. Amplification by Poisson sampling is stated under
add/remove adjacency (Abadi et al. 2016; Mironov, Talwar and Zhang 2019), so a
sampled mechanism must be ``ADD_REMOVE_ONE``. A sampled Gaussian serialises
under its own kind, ``poisson_sampled_gaussian``, so that a reader that does
not know sampling refuses it instead of silently reading an unsampled release;
an unsampled one keeps kind ``gaussian`` and the exact dict it always had.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from privadapt.common.mechanisms.base import (
    MECHANISM_KINDS,
    Adjacency,
    KernelMechanism,
    Mechanism,
)
from privadapt.common.mechanisms.discrete_laplace import DiscreteLaplaceMechanism
from privadapt.common.mechanisms.discrete_report_noisy_min import DiscreteReportNoisyMin
from privadapt.common.mechanisms.discrete_selection import DiscreteExponentialMechanism
from privadapt.common.mechanisms.distributed_discrete_gaussian import (
    DistributedDiscreteGaussianMechanism,
)
from privadapt.common.mechanisms.events import PureDpEvent, ZCdpEvent
from privadapt.common.mechanisms.gaussian import GaussianBlock, GaussianMechanism
from privadapt.common.mechanisms.generalized_exponential import GeneralizedExponentialMechanism
from privadapt.common.mechanisms.laplace import LaplaceMechanism
from privadapt.common.mechanisms.no_noise import NoNoise
from privadapt.common.mechanisms.selection import (
    ExponentialMechanism,
    ReportNoisyMin,
    SelectionMechanism,
)

__all__ = [
    "MECHANISM_KINDS",
    "Adjacency",
    "DiscreteExponentialMechanism",
    "DiscreteLaplaceMechanism",
    "DiscreteReportNoisyMin",
    "DistributedDiscreteGaussianMechanism",
    "ExponentialMechanism",
    "GaussianBlock",
    "GaussianMechanism",
    "GeneralizedExponentialMechanism",
    "KernelMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "NoNoise",
    "PureDpEvent",
    "ReportNoisyMin",
    "SelectionMechanism",
    "ZCdpEvent",
    "mechanism_from_dict",
    "mechanism_to_dict",
]

# Every module of the package, so that every mechanism class is registered
# (MECHANISM_KINDS) whether or not it is re-exported above.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def mechanism_to_dict(mechanism: Mechanism) -> dict[str, Any]:
    """A JSON-compatible description that :func:`mechanism_from_dict` inverts."""
    if MECHANISM_KINDS.get(getattr(mechanism, "kind", None)) is not type(mechanism):
        raise TypeError(f"not a privadapt mechanism: {mechanism!r}")
    return mechanism.to_dict()


def mechanism_from_dict(data: dict[str, Any]) -> Mechanism:
    """Rebuild a mechanism from :func:`mechanism_to_dict`'s output; raises
    ``ValueError`` for an unknown kind or a malformed field."""
    try:
        kind = data["kind"]
        cls = MECHANISM_KINDS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(
                f"unknown mechanism kind {kind!r}; known: {sorted(MECHANISM_KINDS)}"
            )
        return cls.from_dict(data)
    except (KeyError, TypeError) as err:
        raise ValueError(f"malformed mechanism description {data!r}: {err}") from err
