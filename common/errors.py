"""Errors a user can act on. Each message says what was wrong, where, and what
to do (DESIGN.md section 7); command-line entry points print them without a
traceback."""

from __future__ import annotations


class PrivadaptError(Exception):
    """Base class of every expected, user-facing error."""


class DataError(PrivadaptError, ValueError):
    """A data file is missing, malformed, or violates its schema."""


class ConfigError(PrivadaptError, ValueError):
    """A configuration or policy file is missing or invalid."""


class QueryRefusedError(PrivadaptError):
    """A site refused a query: its policy forbids it."""


class BudgetExceededError(QueryRefusedError):
    """Answering would push a site's composed epsilon over its cap."""


class ReplayError(QueryRefusedError):
    """A query id was already answered for this job."""


class WireError(PrivadaptError, ValueError):
    """A message from the network is malformed (wrong dtype or shape, NaN, a
    missing or unknown field); the receiver rejects it and keeps running."""


class UncertifiedComputationError(PrivadaptError, ArithmeticError):
    """A kernel's a posteriori floating-point certificate did not fit the error
    it charges (e.g. ``exact_discrepancy``, common/numerics/certified_quadratic.py): the
    value must not be released. The site refuses with public words only and
    disables the kernel until its operator restarts it (client/site.py)."""
