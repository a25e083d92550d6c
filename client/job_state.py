"""A job's site-side state (e.g. PCnvxAdap's per-record weights u_i) as bytes,
for the site's database, without pickle.

Kernels keep their per-job state in nested dicts of numpy arrays and Python
numbers. It is flattened to ``"outer/inner"`` keys and stored with
``numpy.savez`` (``allow_pickle=False`` both ways), so a tampered or corrupt
database can at worst fail to load, never run code. Zero-dimensional arrays
come back as Python numbers; everything else exactly as stored.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np

_SEPARATOR = "/"


def encode_state(state: Mapping[str, Any]) -> bytes:
    """``state`` as npz bytes; ``ValueError`` for a value that is not an
    array, a number, a bool or a nested mapping of those."""
    flat: dict[str, np.ndarray] = {}
    _flatten(state, "", flat)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **flat)
    return buffer.getvalue()


def decode_state(data: bytes) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        for key in archive.files:
            value = archive[key]
            *outer, last = key.split(_SEPARATOR)
            target = nested
            for part in outer:
                target = target.setdefault(part, {})
            target[last] = value.item() if value.ndim == 0 else value
    return nested


def _flatten(state: Mapping[str, Any], prefix: str, out: dict[str, np.ndarray]) -> None:
    for key, value in state.items():
        if not isinstance(key, str) or _SEPARATOR in key or not key:
            raise ValueError(f"state key {key!r} must be a non-empty string without '/'")
        name = prefix + key
        if isinstance(value, Mapping):
            _flatten(value, name + _SEPARATOR, out)
            continue
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise ValueError(f"state value {name!r} of type {type(value).__name__} cannot be "
                             "stored: use numbers or numeric arrays")
        out[name] = array
