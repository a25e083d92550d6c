"""Record parts: a query may ask a site to run its kernel on one part of its
records (a training part or a validation part), chosen record by record.

Why: a private selection job trains candidates on some
of every site's records and scores them on the others, but the coordinator
never sees a record, so it cannot split them. It names a split instead,
``RecordPart(part, validation_fraction, salt)``, and every site applies it to
its own records:

    U_i = (first 8 bytes of SHA-256(tag || len(salt) || salt || d || x_i || y_i),
           read as a big-endian integer) / 2^64,
    record i is in "validation" iff U_i < validation_fraction, else in "train",

with x_i the record's d features and y_i its label as float64 little-endian,
exactly as stored (every bit: 0.0 and -0.0 differ). ``"all"`` is every record
(the default). Membership is a function of the record alone (and the public
salt and fraction), so adding, removing or replacing one record changes only
that record's own membership, never another's; identical records land in the
same part (harmless: the privacy unit is one record, and each copy is one).

Privacy (the crux: what a query on a part costs).

* Add/remove adjacency. D' = D + {x}: the part of D' is the part of D plus x
  if x lands in it, else the same. So on every part the pair is add/remove
  neighbours or equal, and the kernel's add/remove sensitivity holds as it is.
* Replace-one adjacency. D = S + {x}, D' = S + {x'}; write P(.) for a part.
  P(D) = P(S) + {x if x in P}, P(D') = P(S) + {x' if x' in P}, so on the part:

      x in P, x' in P       -> replace-one neighbours (P(S) + {x}, P(S) + {x'})
      x in P, x' not in P   -> remove one             (P(S) + {x}, P(S))
      x not in P, x' in P   -> add one                (P(S), P(S) + {x'})
      neither               -> equal.

  So the released value moves by at most max(replace-one sensitivity,
  add/remove sensitivity) of the kernel, block by block (and score by score
  for a selection), and a mechanism calibrated to that maximum is a
  replace-one mechanism on the site's whole data with that sensitivity: the
  site charges it so, under its policy's adjacency
  (:func:`charged_adjacencies`, applied in ``client/query_admission.py``, the
  one place a site decides what it charges). Charging the replace-one
  sensitivity alone is not enough: a noiseless ``record_count`` has
  replace-one sensitivity 0 (n is public) but the size of a part is private,
  and it changes by one when x moves between parts.
* The guarantee holds for *every* salt and fraction, whoever chose them: the
  argument uses only that membership is a function of the record itself. A
  hostile coordinator's choice of salt therefore buys it nothing; the range
  checks on the fraction are there for the size estimates below and to keep
  queries meaningful, not for privacy.
* Parts are charged like any query (sequential composition). No parallel
  composition across the train and validation parts is claimed: under
  replace-one one replacement can change both (x leaves train, x' joins
  validation).
* Kernels with per-record state (``Kernel.per_record_state``) keep one value
  per record across a job's queries; the site binds such state to the part it
  was created on and refuses a later query of the job on another part
  (client/site.py).
* Known limit, as for Poisson sampling: a kernel's running time grows with
  the part's size.

Sizes. The true size of a part is private (it depends on which records there
are). :meth:`RecordPart.public_size` gives a *public estimate*,
round(fraction n) for validation and n minus that for train, computed from the
public n alone; an algorithm may use it to normalise, never as a count.

Cost: one SHA-256 per record (about a microsecond), computed once per salt
and kept for the last :data:`CACHED_SALTS` salts (:class:`RecordSplitter`), so
the many queries of one job cost nothing more.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from typing import ClassVar

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import frozen_value

ALL, TRAIN, VALIDATION = "all", "train", "validation"
PART_NAMES = (ALL, TRAIN, VALIDATION)
#: The range of validation fractions a site accepts: 1/64 .. 1/2.
VALIDATION_FRACTION_RANGE = (1.0 / 64.0, 0.5)
#: Longest salt accepted (printable ASCII).
MAX_SALT_CHARS = 128
#: Salts whose per-record hashes a site keeps (most recently used first).
CACHED_SALTS = 4

_TAG = b"privadapt/record-part/v1\x00"
#: Rows hashed per block (bytes of their float64 encoding).
_HASH_BLOCK_BYTES = 1 << 20


@frozen_value
class RecordPart:
    """Which of a site's records a query runs on (module docstring).

    ``RecordPart.ALL`` (the default) is every record; its fraction and salt
    are set to the canonical 0.0 and "" whatever was given, so that two
    queries on every record have the same digest. ``ValueError`` for an
    unknown part, a fraction outside :data:`VALIDATION_FRACTION_RANGE`
    (or NaN), or a salt that is not printable ASCII of at most
    :data:`MAX_SALT_CHARS` characters.
    """

    part: str = ALL
    validation_fraction: float = 0.0
    salt: str = ""

    ALL: ClassVar[RecordPart]

    def __post_init__(self) -> None:
        if self.part not in PART_NAMES:
            raise ValueError(f"records: part must be one of {list(PART_NAMES)}, "
                             f"got {str(self.part)[:64]!r}")
        if self.part == ALL:
            self.validation_fraction = 0.0
            self.salt = ""
            return
        fraction = self.validation_fraction
        low, high = VALIDATION_FRACTION_RANGE
        if (isinstance(fraction, bool) or not isinstance(fraction, int | float)
                or not low <= fraction <= high):  # NaN fails the comparison
            raise ValueError(f"records: validation_fraction must be a number in [1/64, 1/2], "
                             f"got {fraction!r}")
        self.validation_fraction = float(fraction)
        salt = self.salt
        if (not isinstance(salt, str) or len(salt) > MAX_SALT_CHARS or not salt.isascii()
                or not salt.isprintable()):
            shown = salt[:64] if isinstance(salt, str) else salt
            raise ValueError(f"records: salt must be printable ASCII of at most "
                             f"{MAX_SALT_CHARS} characters, got {shown!r}")

    @property
    def is_all(self) -> bool:
        return self.part == ALL

    def to_dict(self) -> dict[str, str | float]:
        """The canonical description (bound into the query digest)."""
        return {"part": self.part, "validation_fraction": self.validation_fraction,
                "salt": self.salt}

    def public_size(self, num_records: int) -> int:
        """A PUBLIC estimate of the part's size at a site of public size n,
        for normalisation only: round(fraction n) for validation, n minus that
        for train, n for all. The true size is private and differs from it."""
        if self.part == ALL:
            return num_records
        validation = round(self.validation_fraction * num_records)
        return validation if self.part == VALIDATION else num_records - validation

    def membership(self, hashes: np.ndarray) -> np.ndarray:
        """Which records are in the part, from their :func:`record_hashes`
        under this part's salt: U_i < fraction, compared exactly as integers
        (fraction 2^64 is an integer for every accepted fraction)."""
        if self.part == ALL:
            return np.ones(len(hashes), dtype=bool)
        threshold = np.uint64(int(self.validation_fraction * 2.0**64))
        in_validation = hashes < threshold
        return in_validation if self.part == VALIDATION else ~in_validation


RecordPart.ALL = RecordPart()


def charged_adjacencies(records: RecordPart, adjacency: Adjacency) -> tuple[Adjacency, ...]:
    """The adjacencies whose sensitivities a site charges the maximum of,
    block by block, for a query on ``records`` under its policy's
    ``adjacency`` (module docstring): only ``adjacency`` on every record or
    under add/remove; both replace-one and add/remove on a part under
    replace-one."""
    adjacency = Adjacency(adjacency)
    if records.is_all or adjacency == Adjacency.ADD_REMOVE_ONE:
        return (adjacency,)
    return (Adjacency.REPLACE_ONE, Adjacency.ADD_REMOVE_ONE)


def worst_case(per_adjacency: list[tuple[float, ...]]) -> tuple[float, ...]:
    """The entrywise maximum of sensitivity tuples (one per adjacency of
    :func:`charged_adjacencies`); ``ValueError`` if their lengths differ."""
    lengths = {len(values) for values in per_adjacency}
    if len(lengths) != 1:
        raise ValueError(f"sensitivities of different lengths {sorted(lengths)}")
    return tuple(max(values) for values in zip(*per_adjacency, strict=True))


def record_hashes(data: Dataset, salt: str) -> np.ndarray:
    """Per record, the first 8 bytes of its salted SHA-256 as a uint64
    (module docstring); the salt must be one a :class:`RecordPart` accepts."""
    features, labels = data.features, data.labels
    dim = features.shape[1]
    encoded = salt.encode("ascii")
    prefix = hashlib.sha256(_TAG + struct.pack(">H", len(encoded)) + encoded
                            + struct.pack(">Q", dim))
    width = 8 * (dim + 1)
    digests = bytearray(8 * len(labels))
    # Rows are laid out [x_i, y_i] in blocks of at most _HASH_BLOCK_BYTES, so
    # hashing needs a bounded buffer, not two copies of the whole dataset.
    block = max(1, _HASH_BLOCK_BYTES // width)
    rows = np.empty((min(block, len(labels)), dim + 1), dtype="<f8")
    for start in range(0, len(labels), block):
        stop = min(start + block, len(labels))
        chunk = rows[:stop - start]
        chunk[:, :dim] = features[start:stop]  # float64 -> float64: every bit as stored
        chunk[:, dim] = labels[start:stop]
        view = memoryview(chunk).cast("B")
        for i in range(stop - start):
            hasher = prefix.copy()
            hasher.update(view[i * width:(i + 1) * width])
            digests[8 * (start + i):8 * (start + i) + 8] = hasher.digest()[:8]
    return np.frombuffer(bytes(digests), dtype=">u8").astype(np.uint64)


class RecordSplitter:
    """A site's records, split into parts on demand; the per-record hashes
    of the last :data:`CACHED_SALTS` salts are kept, so that every query of
    a job after the first costs one comparison per record."""

    def __init__(self, data: Dataset, cached_salts: int = CACHED_SALTS) -> None:
        self._data = data
        self._cached_salts = max(1, cached_salts)
        self._hashes: OrderedDict[str, np.ndarray] = OrderedDict()

    def records(self, part: RecordPart) -> Dataset:
        """The records of ``part`` (the site's data itself for ``ALL``)."""
        if part.is_all:
            return self._data
        chosen = part.membership(self._hashes_for(part.salt))
        data = self._data
        return Dataset(data.features[chosen], data.labels[chosen], data.feature_names)

    def _hashes_for(self, salt: str) -> np.ndarray:
        if salt in self._hashes:
            self._hashes.move_to_end(salt)
            return self._hashes[salt]
        hashes = record_hashes(self._data, salt)
        self._hashes[salt] = hashes
        while len(self._hashes) > self._cached_salts:
            self._hashes.popitem(last=False)
        return hashes

