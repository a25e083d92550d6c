"""Per-site answers as a networked round returns and the store keeps them.

A ``per_site`` round (common/federation.py, ``ReleaseForm``) leaves every
participant's own answer with the coordinator instead of one masked sum. The
round hub and the store hold a step's answer as one flat tuple of blocks, so a
per-site answer is flattened in participant order (site 1's blocks, then site
2's, ...), every site holding the same number of blocks; the same flat form is
what a resumed job replays from the store. A selection's answer is one block
of shape (1,) per site (one site, in practice) holding the released index.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privadapt.common.federation import PerSiteAnswer, SelectionAnswer
from privadapt.common.numerics.fixed_point import FixedPointCodec


def flatten(per_site: Sequence[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """The blocks of every site, in participant order, as one tuple."""
    return tuple(block for blocks in per_site for block in blocks)


def decode_per_site(
    raw: Sequence[tuple[np.ndarray, ...]], codec: FixedPointCodec, releases_index: bool
) -> tuple[np.ndarray, ...]:
    """Each site's uint64 blocks, decoded from the grid (an index is kept as
    the integer it is), flattened."""
    if releases_index:
        return flatten([tuple(block.astype(np.int64) for block in blocks) for blocks in raw])
    return flatten([tuple(codec.decode(block) for block in blocks) for blocks in raw])


def per_site_answer(
    query_id: str, blocks: Sequence[np.ndarray], participants: Sequence[str]
) -> PerSiteAnswer:
    """The flat blocks of a per-site step back as one answer per site."""
    if not participants or len(blocks) % len(participants):
        raise ValueError(f"{len(blocks)} blocks cannot be split among the "
                         f"{len(participants)} participants {list(participants)}")
    each = len(blocks) // len(participants)
    return PerSiteAnswer(query_id, {
        name: tuple(blocks[k * each:(k + 1) * each]) for k, name in enumerate(participants)
    })


def selection_answer(
    query_id: str, blocks: Sequence[np.ndarray], participants: Sequence[str],
    num_candidates: int,
) -> SelectionAnswer:
    """The one site's released index, checked to name one of the candidates."""
    if len(participants) != 1 or len(blocks) != 1 or blocks[0].shape != (1,):
        raise ValueError(f"a selection is one index from one site; got blocks of shapes "
                         f"{[b.shape for b in blocks]} from {list(participants)}")
    index = int(blocks[0][0])
    if not 0 <= index < num_candidates:
        raise ValueError(f"site {participants[0]!r} released index {index}, not one of the "
                         f"{num_candidates} candidates")
    return SelectionAnswer(query_id, index, participants[0])
