"""What a site charges for a kernel query: the one rule, shared by the site
that charges it and the coordinator that previews it.

A site (client/query_admission.py) never charges the sensitivities a query
declares: it charges the query's noise against the kernel's *own*
sensitivities under its policy's adjacency, plus what rounding onto the
fixed-point grid and the kernel's float arithmetic can add
(:meth:`Kernel.charged_sensitivities`, :meth:`Kernel.charged_score_sensitivities`).
On a part of the records (:mod:`privadapt.common.data.record_parts`) under
replace-one it charges, entry by entry, the larger of the kernel's
replace-one and add/remove values, since replacing a record can move it into
or out of the part (the derivation is in that module's docstring).

A dry run (server/jobs/privacy_plan.py) previews each site's charge with the same
functions, so what it shows is what the site will charge, not a second
description of the rule that could drift from it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from privadapt.common.data.record_parts import RecordPart, charged_adjacencies, worst_case
from privadapt.common.kernels.base import Kernel
from privadapt.common.kernels.grid_rounding import Norm
from privadapt.common.mechanisms import Adjacency, KernelMechanism, Mechanism, SelectionMechanism


class PartSensitivityError(ValueError):
    """A query on a part needs an add/remove sensitivity the kernel does not
    define (its computation raised ``cause``): the site refuses the query."""

    def __init__(self, records: RecordPart, adjacency: Adjacency, needed: Adjacency,
                 cause: Exception) -> None:
        self.records, self.adjacency, self.needed, self.cause = records, adjacency, needed, cause
        super().__init__(
            f"a query on the {records.part!r} part of the records under {adjacency} adjacency "
            f"is charged the kernel's {needed} sensitivity too (replacing a record can move "
            f"it into or out of the part), which this kernel does not define ({cause}); ask "
            "on every record instead")


def on_records(records: RecordPart, adjacency: Adjacency,
               sensitivities: Callable[[Adjacency], Sequence[float]]) -> tuple[float, ...]:
    """``sensitivities`` under ``adjacency`` or, for a query on a part of the
    records under replace-one, the larger of its replace-one and add/remove
    values entry by entry. An error under ``adjacency`` itself propagates as
    it is; one under the other adjacency a part needs is
    :class:`PartSensitivityError`."""
    adjacency = Adjacency(adjacency)
    values = []
    for each in charged_adjacencies(records, adjacency):
        try:
            values.append(tuple(sensitivities(each)))
        except (ArithmeticError, ValueError) as err:
            if each == adjacency:
                raise
            raise PartSensitivityError(records, adjacency, each, err) from None
    return worst_case(values)


def charged_block_sensitivities(kernel: Kernel, params: Any, records: RecordPart,
                                adjacency: Adjacency, norm: Norm, dim: int,
                                fractional_bits: int, max_records: int) -> tuple[float, ...]:
    """Every block's sensitivity (released, then local) as a site accounting
    under ``adjacency`` on the grid 2^-``fractional_bits``, sizing its float
    error for at most ``max_records`` records, charges a sum on ``records``."""
    return on_records(records, adjacency, lambda each: kernel.charged_sensitivities(
        params, each, norm, dim, fractional_bits, max_records))


def charged_scores(kernel: Kernel, params: Any, records: RecordPart, adjacency: Adjacency,
                   dim: int, fractional_bits: int, max_records: int,
                   declared: int) -> tuple[float, ...]:
    """Each candidate's score sensitivity as the site charges a selection on
    ``records``; one value (the largest) when the query declares one uniform
    sensitivity (``declared`` == 1)."""
    scores = on_records(records, adjacency, lambda each: kernel.charged_score_sensitivities(
        params, each, dim, fractional_bits, max_records))
    return (max(scores),) if declared == 1 else scores


def site_charge(kernel: Kernel, params: Any, mechanism: Mechanism, records: RecordPart,
                adjacency: Adjacency, dim: int, fractional_bits: int,
                max_records: int) -> Mechanism:
    """The query's ``mechanism`` as a site accounting under ``adjacency``
    charges it: the same noise (or randomisation, for a selection) against
    the kernel's own charged sensitivities on ``records``. ``ValueError``
    (:class:`PartSensitivityError` among them) when they cannot be computed."""
    if isinstance(mechanism, SelectionMechanism):
        scores = charged_scores(kernel, params, records, adjacency, dim, fractional_bits,
                                max_records, len(mechanism.score_sensitivities))
        return mechanism.with_score_sensitivities(scores, adjacency)
    if not isinstance(mechanism, KernelMechanism):
        raise ValueError(f"{type(mechanism).__name__} adds no noise a kernel can use")
    own = charged_block_sensitivities(kernel, params, records, adjacency,
                                      mechanism.noise_norm, dim, fractional_bits, max_records)
    return mechanism.with_sensitivities(own, adjacency)
