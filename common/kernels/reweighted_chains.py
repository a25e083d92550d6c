"""The reweighting chains of a job: several descents of the
``reweighted_gradient`` kernel (PCnvxAdap / PNCnvxAdap) in one job, each with
its own per-record weights u at the site.

Why: ``radius="auto"`` trains one adapter per norm guess, and a selection job
may hold two adapters, all in one job (one ledger, adaptive composition over
all its releases). The public query parameter ``chain`` (at most
``MAX_CHAIN_NAME`` characters of [a-z0-9_-]) names the descent a step belongs
to; "" (the default) is the job's original descent, whose queries carry no
``chain`` on the wire, so their encoding and digest are unchanged.

Layout in the job's state (one mapping per job, committed with each charge to
the site database and read back after a restart, client/job_state.py): the
default chain where it always was, under ``"reweighted_gradient"``; a named
chain under ``"reweighted_gradient_chains"`` / <chain>. Each chain has its
own weights, step counter and retry snapshot, so steps come in order per
chain and a retried step restarts only its own chain.

Record part: all chains of a job share the part the job's state is bound to
(the site binds the job's state to the part of its first stateful query and
refuses the job's queries on another, client/site.py). The chains of one job
are descents on the same training records (the guesses of a norm search or
the candidates of a selection, all on the "train" part); one binding per job
keeps that check in one place, and a job needing another part is a new job.

Privacy: each chain's u is hidden state, as the default chain's, never
released; every release of every chain is charged to the job's ledger like
any other, so the adaptive composition over all the job's releases covers
them whatever order the coordinator interleaves them in (each release's
sensitivity holds for any u, the kernel's docstring).

Bound (a hostile coordinator could open chains without end, each holding n
floats at the site): ``check_state`` refuses a step that would open chain
number ``MAX_CHAINS + 1`` of a job, before the ledger charges and before any
record is read; a malformed name is refused when the params are read. Each
chain keeps two n-vectors of float64 (u and its snapshot), so a job's state
is at most ``MAX_CHAINS`` x 2 x 8 n = 256 n bytes (25.6 MB at n = 100 000),
held in memory and rewritten to the site database with each charge of the job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import Any

# The chains one job may hold at a site (the memory bound above).
MAX_CHAINS = 16
MAX_CHAIN_NAME = 32
_CHAIN_NAME = re.compile(r"[a-z0-9_-]*")
_DEFAULT_KEY = "reweighted_gradient"
_CHAINS_KEY = "reweighted_gradient_chains"


def check_chain(value: Any) -> str:
    """A chain name (module docstring): a string of at most ``MAX_CHAIN_NAME``
    characters of [a-z0-9_-], "" for the default chain; ``ValueError`` else."""
    if not isinstance(value, str) or len(value) > MAX_CHAIN_NAME \
            or not _CHAIN_NAME.fullmatch(value):
        raise ValueError(f"parameter 'chain' must be at most {MAX_CHAIN_NAME} characters of "
                         f"[a-z0-9_-], got {str(value)[:40]!r}")
    return value


def chain_names(state: Mapping[str, Any]) -> list[str]:
    """The chains the job's state holds weights for ("" the default one)."""
    names = [""] if state.get(_DEFAULT_KEY) else []
    return names + sorted(state.get(_CHAINS_KEY) or {})


def chain_state(state: Mapping[str, Any], chain: str) -> Any:
    """The state of ``chain`` in the job's state, {} when it has none yet."""
    if not chain:
        return state.get(_DEFAULT_KEY) or {}
    return (state.get(_CHAINS_KEY) or {}).get(chain) or {}


def open_chain_state(state: MutableMapping[str, Any], chain: str) -> MutableMapping[str, Any]:
    """The state of ``chain``, created empty in the job's state if new."""
    if not chain:
        return state.setdefault(_DEFAULT_KEY, {})
    return state.setdefault(_CHAINS_KEY, {}).setdefault(chain, {})
