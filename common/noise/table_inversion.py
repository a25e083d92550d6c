"""Exact sampling by inversion of a certified CDF table: about one 64-bit
word and a few array passes per sample.

Why: the rejection samplers of :mod:`privadapt.common.noise.discrete` are
exact but spend dozens of words and array passes per sample. For a law on
{0, 1, 2, ...} whose CDF F can be bracketed to any precision, inversion --
N = min{k : U < F_k} for one uniform U on [0, 1) -- needs one word almost
always, and no float ever decides a sample.

Certified windows. A law (:class:`CdfLaw`) gives, for any ``bits``, a
:class:`CdfWindow`: integers ``lower[i] <= F_(first + i) 2^bits <= upper[i]``
(floors and ceilings of interval bounds) for k in [first, first + len), and
``start >= F_(first - 1) 2^bits`` (0 when ``first`` is 0). The bounds must
converge: their widths stay a few units as ``bits`` grows, and the window
widens until the mass outside it is below a few units of 2^-bits.

Decision. With U = (u + V) / 2^bits, u a ``bits``-bit integer made of words of
the stream and V uniform on [0, 1) (the bits not read yet), let i = #{j :
upper[j] <= u}. Then U >= u / 2^bits >= F_(first + i - 1) (upper is
nondecreasing), and if also u >= start (or i > 0) and u + 1 <= lower[i], then
U < (u + 1) / 2^bits <= F_(first + i): the sample is N = first + i, decided by
integer comparisons alone. Otherwise (u within about two units of some
bound, or outside the window) one more 64-bit word is appended to u and the
comparison repeats at ``bits + 64`` against a finer, wider window
(:func:`_decide_lazily`).

Why this is exact (the privacy property). U is uniform on [0, 1) whatever
words are read, because every further word is a fresh uniform of the
stream, independent of those before: the first word W and the unread V give
U = (W + V) / 2^64, uniform. Both the table path and the lazy path return the
same function of U, min{k : U < F_k}, and each returns only when the integer
comparisons above prove it; so the output's law is exactly F's. The lazy
path ends with probability 1 (U avoids the countably many F_k almost surely,
and the brackets shrink below 2^-bits), and is entered with probability
about 2 (table length) 2^-64 plus the mass outside the table (below 2^-72).

Fast path (:func:`sample_by_inversion`): the 64-bit window is stored as uint64
arrays (``upper - 1`` and ``lower``, with sentinels), plus a guide table
indexed by the top ``g`` bits of a word that gives the count i at the
bucket's smallest word; a few vectorised "advance while upper[i] <= w"
passes finish it (``np.searchsorted`` takes the rare words in crowded
buckets).

Memory. Tables are cached per law, least recently used first out, in a
cache bounded in bytes over the whole process (:class:`TableCache`): a
site's policy sets the bound (``max_sampler_table_bytes``,
:func:`bound_table_memory`; the tightest bound set in a process holds). Which
tables are kept depends only on the sequence of laws asked for, public
parameters of the queries, never on data. A table larger than the whole bound
is built, used and dropped; none is that large under the smallest bound a
policy accepts (:data:`LARGEST_TABLE_BYTES`). One table is built at a time,
so the peak of building (the exact integer window, several times the table)
is paid once however many jobs ask at once.
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from privadapt.common.noise.floating import RandomBits

_WORD_BITS = 64
#: Laws whose table would be longer than this use their rejection samplers:
#: 2^18 entries are about 12 MB of table and guide and about a second of
#: exact arithmetic once per parameter (2^20 took 3.8 s and 290 MB at peak).
MAX_TABLE_ENTRIES = 2**18
#: Vectorised advance passes before the leftover words use np.searchsorted.
_ADVANCE_PASSES = 3
#: The most guide bits (a guide of 2^20 int64 entries is 8 MiB).
_MAX_GUIDE_BITS = 20
#: The bytes of a table of MAX_TABLE_ENTRIES entries: two uint64 arrays of
#: them (with their sentinels) and the largest guide, about 12 MiB.
LARGEST_TABLE_BYTES = 2 * 8 * (MAX_TABLE_ENTRIES + 1) + 8 * 2**_MAX_GUIDE_BITS
#: The process's bound before any site sets one: eight of the largest tables.
DEFAULT_TABLE_MEMORY = 8 * LARGEST_TABLE_BYTES


@dataclass(frozen=True)
class CdfWindow:
    """Integer brackets of F at ``bits`` of precision (module docstring)."""

    bits: int
    first: int
    start: int
    lower: tuple[int, ...]
    upper: tuple[int, ...]


class CdfLaw(Protocol):
    """A law on {0, 1, ...} with a certified CDF; hashable (tables are cached)."""

    def cdf_window(self, bits: int) -> CdfWindow: ...


def normalised_window(bits: int, first: int, lower_weights: list[int],
                      upper_weights: list[int], left_tail: int, right_tail: int) -> CdfWindow:
    """A :class:`CdfWindow` from unnormalised weights: lower_weights[i] <= c w_(first + i)
    <= upper_weights[i] for one unknown c > 0, the weights before the window
    summing to at most c ``left_tail`` and those after to at most c
    ``right_tail``. With Z = sum of all c w_k: Z_lo = sum(lower) and Z_hi =
    sum(upper) + both tails bracket it, so F_k = (c w below k) / Z lies in
    [prefix_lo / Z_hi, (left_tail + prefix_hi) / Z_lo], floored and ceiled at
    2^bits (the upper one capped at 1)."""
    z_lo = sum(lower_weights)
    z_hi = sum(upper_weights) + left_tail + right_tail
    one = 1 << bits
    lower, upper = [], []
    prefix_lo, prefix_hi = 0, left_tail
    for lo, hi in zip(lower_weights, upper_weights, strict=True):
        prefix_lo += lo
        prefix_hi += hi
        lower.append((prefix_lo << bits) // z_hi)
        upper.append(min(one, -((-prefix_hi << bits) // z_lo)))
    start = min(one, -((-left_tail << bits) // z_lo))
    return CdfWindow(bits, first, start, tuple(lower), tuple(upper))


@dataclass(frozen=True)
class InversionTable:
    """The 64-bit window as arrays: ``upper_minus_one`` (with a sentinel
    2^64 - 1), ``lower`` (with a sentinel 0, so a word past the table is
    undecided), the guide and its shift."""

    first: int
    start: int
    upper_minus_one: np.ndarray
    lower: np.ndarray
    guide: np.ndarray
    shift: np.uint64


    @property
    def nbytes(self) -> int:
        return self.upper_minus_one.nbytes + self.lower.nbytes + self.guide.nbytes


class TableCache:
    """Inversion tables by (law, bits), least recently used first out, holding
    at most ``max_bytes`` (module docstring, "Memory")."""

    def __init__(self, max_bytes: int = DEFAULT_TABLE_MEMORY) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[tuple[CdfLaw, int], InversionTable] = OrderedDict()
        self._lock = threading.Lock()
        # One build at a time: a build's peak is several times its table.
        self._building = threading.Lock()

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(table.nbytes for table in self._tables.values())

    def bound(self, max_bytes: int) -> None:
        """Lower the bound to ``max_bytes`` (never raise it), evicting at once."""
        with self._lock:
            self.max_bytes = min(self.max_bytes, max_bytes)
            self._evict(0)

    def table(self, law: CdfLaw, table_bits: int) -> InversionTable:
        key = (law, table_bits)
        with self._lock:
            if key in self._tables:
                self._tables.move_to_end(key)
                return self._tables[key]
        with self._building:
            with self._lock:  # built by another thread while this one waited
                if key in self._tables:
                    self._tables.move_to_end(key)
                    return self._tables[key]
            table = _build_table(law, table_bits)
            with self._lock:
                if table.nbytes <= self.max_bytes:
                    self._evict(table.nbytes)
                    self._tables[key] = table
        return table

    def _evict(self, room: int) -> None:
        """Drop the least recently used tables until ``room`` more bytes fit
        (called with the lock held)."""
        held = sum(table.nbytes for table in self._tables.values())
        while self._tables and held + room > self.max_bytes:
            _, dropped = self._tables.popitem(last=False)
            held -= dropped.nbytes


#: The process's tables: shared by every site and job in it.
TABLES = TableCache()


def bound_table_memory(max_bytes: int) -> None:
    """Bound the bytes of the process's cached tables (the tightest bound holds)."""
    TABLES.bound(max_bytes)


def inversion_table(law: CdfLaw, table_bits: int = _WORD_BITS) -> InversionTable:
    """The fast-path table of ``law``, from the process's cache. ``table_bits``
    below 64 (a test hook) builds it from a coarser window scaled up to 64
    bits: still certified, only more words are left to the lazy path."""
    return TABLES.table(law, table_bits)


def _build_table(law: CdfLaw, table_bits: int) -> InversionTable:
    window = law.cdf_window(table_bits)
    scale = 1 << (_WORD_BITS - table_bits)
    upper = [min(max(value * scale, 1), 2**64) - 1 for value in window.upper]
    upper_minus_one = np.array([*upper, 2**64 - 1], dtype=np.uint64)
    lower = np.array([*(value * scale for value in window.lower), 0], dtype=np.uint64)
    guide_bits = min(_MAX_GUIDE_BITS, max(8, len(upper).bit_length() + 2))
    shift = np.uint64(_WORD_BITS - guide_bits)
    bucket_starts = np.arange(1 << guide_bits, dtype=np.uint64) << shift
    guide = np.searchsorted(upper_minus_one[:-1], bucket_starts, side="left").astype(np.int64)
    # Cached and shared by every later call at this law: a stray in-place
    # write would change every later sample's law, so none is allowed.
    for array in (upper_minus_one, lower, guide):
        array.flags.writeable = False
    return InversionTable(window.first, window.start * scale, upper_minus_one, lower,
                          guide, shift)


def sample_by_inversion(law: CdfLaw, count: int, stream: RandomBits,
                        table_bits: int = _WORD_BITS) -> np.ndarray:
    """``count`` int64 draws of ``law``: one word each, decided by its table
    or, rarely, by :func:`_decide_lazily` (module docstring)."""
    table = inversion_table(law, table_bits)
    words = stream.words(count)
    index = table.guide[words >> table.shift]
    # index = #{j : upper_minus_one[j] < w} after advancing (upper <= w).
    active = np.flatnonzero(table.upper_minus_one[index] < words)
    for _ in range(_ADVANCE_PASSES):
        if not active.size:
            break
        index[active] += 1
        active = active[table.upper_minus_one[index[active]] < words[active]]
    if active.size:
        index[active] = np.searchsorted(table.upper_minus_one[:-1], words[active], side="left")
    undecided = words >= table.lower[index]
    if table.start:
        undecided |= words < np.uint64(table.start)
    samples = index + table.first
    for i in np.flatnonzero(undecided):  # about 2^-55 each
        samples[i] = _decide_lazily(law, int(words[i]), stream)
    return samples


@functools.lru_cache(maxsize=4)  # a 2^18-entry window at 128 bits is ~25 MB of ints
def _window(law: CdfLaw, bits: int) -> CdfWindow:
    return law.cdf_window(bits)


def _decide_lazily(law: CdfLaw, word: int, stream: RandomBits) -> int:
    """N = min{k : U < F_k} for U = (word + V) / 2^64, reading V 64 bits at a
    time until a window decides it (module docstring)."""
    u, bits = word, _WORD_BITS
    while True:
        u, bits = (u << _WORD_BITS) | int(stream.words(1)[0]), bits + _WORD_BITS
        window = _window(law, bits)
        i = bisect.bisect_right(window.upper, u)
        if (i or u >= window.start) and i < len(window.lower) and u + 1 <= window.lower[i]:
            return window.first + i
