"""Kernels with *local* blocks: noised at the site, applied to per-job state, never released.

Some algorithms keep a private variable per record at the site and update it
with noise the algorithm prescribes (seed 000, Alg. 1 lines 10-11: each site's
weights u_i move along a Gaussian-noised gradient). Such a query has two kinds
of blocks, all described by one multi-block ``GaussianMechanism``:

* *released* blocks (first in the mechanism): the kernel's clipped sums, which
  leave the site as distributed noise shares through secure aggregation, as
  for every kernel;
* *local* blocks (last in the mechanism): per-record values the site noises
  itself at the **full** sigma (not a share: nobody else adds noise to them),
  hands back to the kernel to update its state, and never releases.

The site charges its ledger for the whole mechanism, every block's
sensitivity included, so the accounting is the paper's (one Gaussian release
of all blocks per iteration) even though the local blocks stay at the site.

The site drives a query as: ``compute_local`` (local blocks, before noise) ->
noise -> ``apply_local`` (state update) -> ``compute`` (released blocks, which
may depend on the updated state). It runs all three on a working copy of the
job's state and keeps the copy only once the ledger charge has committed.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.kernels.base import Kernel
from privadapt.common.mechanisms import Adjacency


class KernelWithLocalBlocks(Kernel):
    """A kernel whose queries also update per-job state from noised local blocks.

    ``output_shapes`` and ``l2_sensitivities`` describe the released blocks
    only; the local blocks are described by the two ``local_*`` methods below.
    """

    @abstractmethod
    def local_block_shapes(
        self, params: Mapping[str, Any], num_records: int
    ) -> tuple[tuple[int, ...], ...]:
        """Shape of each local block at a site holding ``num_records`` records."""

    @abstractmethod
    def local_l2_sensitivities(
        self, params: Mapping[str, Any], adjacency: Adjacency
    ) -> tuple[float, ...]:
        """Largest L2 change of each local block when one record changes."""

    @abstractmethod
    def compute_local(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        """The local blocks before noise; may prepare ``state`` for this step."""

    @abstractmethod
    def apply_local(
        self,
        data: Dataset,
        params: Mapping[str, Any],
        state: MutableMapping[str, Any],
        noised_blocks: tuple[np.ndarray, ...],
    ) -> None:
        """Update ``state`` from the noised local blocks."""
