"""Non-private source-target clustering (STC): choose k target points T_k that
minimise Cost(T, S, T_k) = (1/|T|) sum_{x in T} Delta(x, S u T_k) (seed 001,
../shared/seeds/001_bc09c11f93585935.txt, Section 3; Euclidean Delta).

The source S is a free centre: only each target point's nearest-source
distance Delta(x, S) matters (Observation 5.1), so every solver here computes
it once, exactly (blocked BLAS, :mod:`.distances`), and then works on the
target alone with a per-point cap r_x = Delta(x, S): a medoid c serves x at
min(||x - c||, r_x).

* :func:`accelerated_k_medoids`: AkM, the solver seed 001 applies to its
  sanitised source (de Mathelin et al., ICLR 2022, "Discrepancy-based active
  learning for domain adaptation"), written from that paper's description:
  greedy initialisation on a random batch of target points, then alternating
  assignment (each point to its nearest medoid, or to the source when that is
  nearer) and medoid update, where each cluster's new medoid is found among
  its members by evaluating the cluster cost sum_x min(||x - c||, r_x) on
  growing random batches of the members and pruning every candidate whose
  running mean minus two standard errors exceeds the best running mean plus
  two standard errors. A round that does not lower the full cost stops it, so
  the cost never rises. ClusterT of seed 001 is AkM with ``source=None``.
* :func:`pam_k_medoids`: plain PAM (Kaufman and Rousseeuw): greedy BUILD on
  every target point, then SWAP passes that make the best (medoid, non-medoid)
  exchange while one lowers the cost, every exchange evaluated exactly
  (FastPAM1's O(n^2) pass, Schubert and Rousseeuw 2019, with the source as a
  centre that cannot be swapped out). The reference AkM is compared with.
* :func:`exhaustive_k_medoids`: the optimum by enumeration, for tiny tests.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from privadapt.server.algorithms.source_target_clustering.distances import (
    as_points,
    distance_blocks,
    nearest_distances,
    pairwise_distances,
)

#: Target points the greedy initialisation of AkM runs on (a random batch).
INIT_BATCH = 1000
#: Members added to every surviving candidate's running mean per pruning round.
EVALUATION_BATCH = 64
#: Candidates evaluated together in one distance block.
CANDIDATE_BLOCK = 512


def _prepared(
    target: np.ndarray, k: int, source: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The target as points and its nearest-source distances (inf: no source)."""
    target = as_points(target, "target")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k <= len(target):
        raise ValueError(f"k must be an integer in [0, |T| = {len(target)}], got {k!r}")
    if source is not None:
        source = as_points(source, "source")
        if len(source) and source.shape[1] != target.shape[1]:
            raise ValueError(f"source has {source.shape[1]} features, target {target.shape[1]}")
    return target, nearest_distances(target, source)


def _finite_caps(source_distances: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The caps r_x with inf (no source) replaced by a bound above every
    target-to-target distance, so greedy gains stay finite and ordered."""
    if np.all(np.isfinite(source_distances)):
        return source_distances
    spread = 2.0 * float(np.max(np.linalg.norm(target - target.mean(axis=0), axis=1))) + 1.0
    return np.minimum(source_distances, spread)


def _greedy(distances: np.ndarray, caps: np.ndarray, k: int) -> list[int]:
    """k columns of ``distances`` (rows: points, columns: candidates) chosen one
    at a time, each the largest drop of sum_x min(caps_x, chosen distances)."""
    current = caps.copy()
    chosen: list[int] = []
    for _ in range(k):
        gains = np.maximum(current[:, None] - distances, 0.0).sum(axis=0)
        gains[chosen] = -np.inf
        best = int(np.argmax(gains))
        chosen.append(best)
        current = np.minimum(current, distances[:, best])
    return chosen


def _assign(
    target: np.ndarray, caps: np.ndarray, medoids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each point's nearest medoid (position in ``medoids``) and its served
    distance; label -1 where the source is at least as near."""
    labels = np.empty(len(target), dtype=np.int64)
    served = np.empty(len(target))
    for start, block in distance_blocks(target, target[medoids]):
        rows = slice(start, start + len(block))
        nearest = block.argmin(axis=1)
        near = block[np.arange(len(block)), nearest]
        source_wins = caps[rows] <= near
        labels[rows] = np.where(source_wins, -1, nearest)
        served[rows] = np.where(source_wins, caps[rows], near)
    return labels, served


def _cluster_medoid(
    points: np.ndarray, caps: np.ndarray, current: int, rng: np.random.Generator
) -> int:
    """The member minimising sum_x min(||x - c||, caps_x) over the members,
    by racing: every candidate's mean over the same growing random batches of
    members, dropping those whose mean - 2 SE exceeds the best mean + 2 SE."""
    size = len(points)
    candidates = np.arange(size)
    order = rng.permutation(size)
    sums = np.zeros(size)
    squares = np.zeros(size)
    seen = 0
    while seen < size and len(candidates) > 1:
        batch = order[seen:seen + EVALUATION_BATCH]
        seen += len(batch)
        for start in range(0, len(candidates), CANDIDATE_BLOCK):
            block = candidates[start:start + CANDIDATE_BLOCK]
            values = np.minimum(pairwise_distances(points[batch], points[block]),
                                caps[batch][:, None])
            sums[block] += values.sum(axis=0)
            squares[block] += (values**2).sum(axis=0)
        if seen >= size:
            break
        means = sums[candidates] / seen
        variance = np.maximum(squares[candidates] / seen - means**2, 0.0)
        margin = 2.0 * np.sqrt(variance / seen)
        keep = means - margin <= np.min(means + margin)
        keep |= candidates == current  # the incumbent stays until the end
        candidates = candidates[keep]
    return int(candidates[np.argmin(sums[candidates])])


def accelerated_k_medoids(
    target: np.ndarray,
    k: int,
    *,
    source: np.ndarray | None = None,
    seed: int | None,
    max_iter: int = 30,
    init_batch: int = INIT_BATCH,
) -> np.ndarray:
    """AkM (module docstring): the indices of k target points (in the order
    chosen) with a small Cost(T, S, T_k); ``source=None`` is ClusterT.
    ``seed`` draws the initial batch and the medoid search's samples (NNA and
    NAS pass their declared ``seed``)."""
    target, source_distances = _prepared(target, k, source)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    caps = _finite_caps(source_distances, target)
    batch = rng.choice(len(target), size=min(len(target), max(init_batch, 2 * k)),
                       replace=False)
    batch_distances = pairwise_distances(target[batch], target[batch])
    medoids = batch[_greedy(batch_distances, caps[batch], k)]
    labels, served = _assign(target, caps, medoids)
    cost = float(served.mean())
    for _ in range(max_iter):
        proposal = medoids.copy()
        for j in range(k):
            members = np.flatnonzero(labels == j)
            if len(members) > 1:
                local = int(np.flatnonzero(members == medoids[j])[0])
                best = _cluster_medoid(target[members], caps[members], local, rng)
                proposal[j] = members[best]
        if np.array_equal(proposal, medoids):
            break
        new_labels, new_served = _assign(target, caps, proposal)
        new_cost = float(new_served.mean())
        if not new_cost < cost:
            break
        medoids, labels, cost = proposal, new_labels, new_cost
    return medoids


def _build(target: np.ndarray, caps: np.ndarray, k: int) -> np.ndarray:
    """PAM's BUILD: greedy over every target point, evaluated on every point."""
    current = caps.copy()
    chosen: list[int] = []
    for _ in range(k):
        gains = np.zeros(len(target))
        for start, block in distance_blocks(target, target):
            rows = current[start:start + len(block)]
            gains += np.maximum(rows[:, None] - block, 0.0).sum(axis=0)
        gains[chosen] = -np.inf
        best = int(np.argmax(gains))
        chosen.append(best)
        current = np.minimum(current, nearest_distances(target, target[best:best + 1]))
    return np.array(chosen, dtype=np.int64)


def _two_nearest(
    target: np.ndarray, caps: np.ndarray, medoids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point: distance to the nearest centre of medoids u {source}, that
    centre's medoid position (-1: the source) and the distance to the second
    nearest (the source counts as a centre that is never removed)."""
    distances = np.column_stack([pairwise_distances(target, target[medoids]), caps])
    order = np.argsort(distances, axis=1, kind="stable")[:, :2]
    rows = np.arange(len(target))
    first = distances[rows, order[:, 0]]
    second = distances[rows, order[:, 1]] if distances.shape[1] > 1 else np.full(len(rows),
                                                                                 np.inf)
    labels = np.where(order[:, 0] == len(medoids), -1, order[:, 0])
    return first, labels, second


def pam_k_medoids(
    target: np.ndarray,
    k: int,
    *,
    source: np.ndarray | None = None,
    max_swaps: int = 200,
) -> np.ndarray:
    """Plain PAM (module docstring): BUILD, then the best improving swap per
    pass until none lowers the cost (or ``max_swaps``)."""
    target, source_distances = _prepared(target, k, source)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    caps = _finite_caps(source_distances, target)
    medoids = _build(target, caps, k)
    n = len(target)
    for _ in range(max_swaps):
        first, labels, second = _two_nearest(target, caps, medoids)
        owner = np.zeros((k, n))
        owned = labels >= 0
        owner[labels[owned], np.flatnonzero(owned)] = 1.0
        best_change, best_swap = -1e-12 * max(float(first.sum()), 1e-300), None
        candidates = np.setdiff1d(np.arange(n), medoids)
        for start in range(0, len(candidates), CANDIDATE_BLOCK):
            block = candidates[start:start + CANDIDATE_BLOCK]
            to_candidate = pairwise_distances(target, target[block])
            gain = np.minimum(to_candidate - first[:, None], 0.0)  # x keeps its centre
            lost = np.minimum(to_candidate, second[:, None]) - first[:, None] - gain
            change = gain.sum(axis=0)[None, :] + owner @ lost  # (k, block)
            position = np.unravel_index(int(np.argmin(change)), change.shape)
            if change[position] < best_change:
                best_change, best_swap = float(change[position]), (position[0],
                                                                   int(block[position[1]]))
        if best_swap is None:
            break
        medoids[best_swap[0]] = best_swap[1]
    return medoids


def exhaustive_k_medoids(
    target: np.ndarray, k: int, *, source: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """The optimal T_k by enumerating all C(n, k) subsets, and its cost
    (tests on tiny instances only: refused above a million subsets)."""
    target, source_distances = _prepared(target, k, source)
    if math.comb(len(target), k) > 10**6:
        raise ValueError(f"C({len(target)}, {k}) subsets is too many to enumerate")
    distances = pairwise_distances(target, target)
    best, best_cost = np.zeros(0, dtype=np.int64), math.inf
    for subset in itertools.combinations(range(len(target)), k):
        served = np.minimum(source_distances, distances[:, list(subset)].min(axis=1)) \
            if k else source_distances
        cost = float(served.mean())
        if cost < best_cost:
            best, best_cost = np.array(subset, dtype=np.int64), cost
    return best, best_cost


__all__ = [
    "accelerated_k_medoids",
    "exhaustive_k_medoids",
    "pam_k_medoids",
]
