"""Epsilon of a ledger stored as a multiset of mechanisms, fast enough to run
inside every charge.

The ledger (:mod:`privadapt.client.ledger.privacy_ledger`) keeps mechanisms as canonical JSON
and composes the whole ledger on each charge. Two things keep that cheap:

* :func:`exact_report` (the policy's own accountant, exactly what
  :func:`privadapt.common.accounting.accountant.epsilon_spent` returns) is cached,
  process-wide, by the multiset, so repeated reads, and the sites of one
  simulation holding the same ledger, build each PLD once;
* the accountant composes Gaussian-only ledgers in closed form
  (:func:`privadapt.common.accounting.analytic_gaussian.gaussian_epsilon`), so the common case
  builds no PLD at all.

Poisson-sampled releases are mixtures, never folded into that closed form: a
ledger holding T of them self-composes their PLD (built once per process and
mechanism) at every charge, about 0.1 s per charge for a few hundred steps.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict

from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import (
    AccountingMethod,
    EpsilonReport,
    PrivacyAccountant,
)
from privadapt.common.mechanisms import (
    Adjacency,
    Mechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)

# Mechanism JSON (see mechanism_json) -> number of charges with it.
Multiset = dict[str, int]

_CACHE_SIZE = 256


def mechanism_json(mechanism: Mechanism) -> str:
    """The canonical stored form of a mechanism."""
    return json.dumps(mechanism_to_dict(mechanism), sort_keys=True)


@functools.lru_cache(maxsize=4096)
def parse_mechanism(text: str) -> Mechanism:
    """The mechanism a stored JSON text describes (parsed once per text)."""
    return mechanism_from_dict(json.loads(text))


_CACHE: OrderedDict[tuple[str, str, float, str], EpsilonReport] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _accountant(multiset: Multiset, policy: SitePolicy) -> PrivacyAccountant:
    accountant = PrivacyAccountant(policy.adjacency, policy.accounting)
    for text, count in multiset.items():
        accountant.compose(parse_mechanism(text), count)
    return accountant


def cheap_bounds(multiset: Multiset, policy: SitePolicy) -> tuple[float, float]:
    """What the ledger checks before :func:`exact_report`, with no PLD built:
    a lower bound on the multiset's epsilon at the cap's delta, and the size
    of the largest PLD the exact figure would build
    (:meth:`PrivacyAccountant.epsilon_lower_bound`, ``pld_points``). Cached
    by the multiset, like :func:`exact_report`: the sites of one simulation
    ask it for the same history."""
    # Keyed in the multiset's own order: the bounds are composed in it.
    return _cheap_bounds(json.dumps(list(multiset.items())), policy.adjacency.value,
                         policy.accounting.value, policy.delta_cap)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cheap_bounds(items: str, adjacency: str, accounting: str,
                  delta: float) -> tuple[float, float]:
    accountant = _composed(items, adjacency, accounting)
    return accountant.epsilon_lower_bound(delta), accountant.pld_points()


def _canonical(multiset: Multiset) -> str:
    return json.dumps(sorted(multiset.items()))


def exact_report(
    multiset: Multiset, policy: SitePolicy, delta: float | None = None
) -> EpsilonReport:
    """The policy's accountant over ``multiset`` at ``delta`` (default: the
    cap's): what :func:`epsilon_spent` returns for the same mechanisms. Cached
    by the multiset."""
    delta = policy.delta_cap if delta is None else delta
    canonical = _canonical(multiset).encode()
    key = (
        policy.adjacency.value,
        policy.accounting.value,
        delta,
        hashlib.sha256(canonical).hexdigest(),
    )
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    report = _accountant(multiset, policy).report(delta)
    with _CACHE_LOCK:
        _CACHE[key] = report
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return report


def pld_points(multiset: Multiset, policy: SitePolicy) -> float:
    """The size of the largest PLD :func:`exact_report` would build for
    ``multiset`` (:meth:`PrivacyAccountant.pld_points`), with no lower bound
    computed: what a charge admitted without the exact figure still checks.
    Cached by the multiset, like :func:`cheap_bounds`."""
    return _pld_points(json.dumps(list(multiset.items())), policy.adjacency.value,
                       policy.accounting.value)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _pld_points(items: str, adjacency: str, accounting: str) -> float:
    return _composed(items, adjacency, accounting).pld_points()


def _composed(items: str, adjacency: str, accounting: str) -> PrivacyAccountant:
    accountant = PrivacyAccountant(Adjacency(adjacency), AccountingMethod(accounting))
    for text, count in json.loads(items):
        accountant.compose(parse_mechanism(text), count)
    return accountant
