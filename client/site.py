"""The Site: the one place a query meets private data.

``Site.answer`` validates a query against the site's policy, runs the kernel,
draws this site's noise share, charges the ledger (committed before anything is
returned) and returns the share. The same class answers in-process
(``LocalFederation``) and behind the site daemon, so policy, ledger and noise
are exercised identically in experiments and in production (DESIGN.md 2, 4).

What the site trusts from the coordinator: nothing about privacy. It computes
the kernel's sensitivity itself, from the public parameters and its own policy's
adjacency, and charges the noise it actually adds against that sensitivity.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privadapt.client.ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.data import Dataset, Schema, load_dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, SitePrivacy, SiteShare
from privadapt.common.kernels import Kernel, get_kernel
from privadapt.common.mechanisms import (
    GaussianMechanism,
    LaplaceMechanism,
    Mechanism,
    NoNoise,
    declared_sensitivities,
)
from privadapt.common.noise import UniformSource, gaussian_share, laplace_share

logger = logging.getLogger(__name__)

# Declared sensitivities may differ from the site's by float rounding only.
_SENSITIVITY_SLACK = 1e-9


class Site:
    """A data holder with a policy and a privacy ledger that answers queries."""

    def __init__(
        self,
        data: Dataset,
        policy: SitePolicy,
        ledger: PrivacyLedger,
        noise_source: UniformSource | None = None,
    ) -> None:
        self._data = data
        self.policy = policy
        self.ledger = ledger
        self._noise_source = noise_source
        self._job_states: dict[str, dict[str, Any]] = {}

    @classmethod
    def open(
        cls,
        data_path: str | Path,
        policy: SitePolicy,
        ledger_path: str | Path,
        schema: Schema | None = None,
    ) -> Site:
        """A site over a data file, with its ledger database (created if absent)."""
        return cls(load_dataset(data_path, schema), policy, PrivacyLedger(ledger_path, policy))

    @property
    def name(self) -> str:
        return self.policy.site_name

    @property
    def num_records(self) -> int:
        return self._data.num_records

    @property
    def dim(self) -> int:
        return self._data.dim

    def answer(self, query: Query, num_participants: int) -> SiteShare:
        """This site's privatised share of ``query`` among ``num_participants``
        sites; raises ``QueryRefusedError`` (or ``BudgetExceededError``) when
        the policy forbids it, before anything is released."""
        kernel = self._checked_kernel(query, num_participants)
        charged = self._charged_mechanism(kernel, query)
        state = self._job_states.setdefault(query.job_id, {})
        blocks = kernel.compute(self._data, query.params, state)
        shares = self._add_noise_shares(blocks, query, num_participants)
        charge = self.ledger.charge(query.job_id, query.query_id, charged)
        logger.info(
            "site=%s job=%s query=%s kernel=%s epsilon_spent=%.4g",
            self.name, query.job_id, query.query_id, query.kernel, charge.epsilon_after,
        )
        return SiteShare(self.name, query.query_id, shares)

    def privacy_spent(self, job_id: str, delta: float | None = None) -> SitePrivacy:
        """This site's spend on ``job_id`` (at ``delta``, default the cap's) and
        in total (at the cap's delta), from its own ledger."""
        return SitePrivacy(
            site_name=self.name,
            job=self.ledger.spent_by_job(job_id, delta),
            total=self.ledger.spent(),
            cap_epsilon=self.policy.epsilon_cap,
            mechanisms=tuple(c.mechanism for c in self.ledger.charges(job_id)),
        )

    def _refuse(self, query: Query, reason: str) -> QueryRefusedError:
        return QueryRefusedError(
            f"site {self.name!r} refused query {query.query_id!r} of job {query.job_id!r} "
            f"(kernel {query.kernel!r}): {reason}"
        )

    def _checked_kernel(self, query: Query, num_participants: int) -> Kernel:
        policy = self.policy
        if policy.allowed_kernels is not None and query.kernel not in policy.allowed_kernels:
            raise self._refuse(query, f"the policy allows only {sorted(policy.allowed_kernels)}")
        try:
            kernel = get_kernel(query.kernel)
            kernel.validate_params(query.params, self.dim)
        except (KeyError, ValueError) as err:
            raise self._refuse(query, str(err)) from None
        if num_participants < policy.min_participants:
            raise self._refuse(
                query,
                f"{num_participants} participants, fewer than the policy's minimum "
                f"{policy.min_participants}",
            )
        if query.collusion_tolerance < policy.collusion_tolerance:
            raise self._refuse(
                query,
                f"the job tolerates t={query.collusion_tolerance} colluding sites but the "
                f"policy requires t >= {policy.collusion_tolerance}",
            )
        if not 0 <= query.collusion_tolerance < num_participants:
            raise self._refuse(
                query,
                f"collusion tolerance t={query.collusion_tolerance} leaves no honest site "
                f"among {num_participants}",
            )
        self._check_bounds(query, kernel.clip_bounds(query.params))
        return kernel

    def _check_bounds(self, query: Query, bounds: Mapping[str, float]) -> None:
        limits = {
            "clip_norm": self.policy.max_clip_norm,
            "label_bound": self.policy.max_label_bound,
        }
        for key, value in bounds.items():
            limit = limits.get(key)
            if limit is not None and value > limit:
                raise self._refuse(query, f"{key}={value:g} exceeds the policy's limit {limit:g}")

    def _charged_mechanism(self, kernel: Kernel, query: Query) -> Mechanism:
        """The mechanism as this site accounts it: the noise the query asks
        for, against the kernel's own sensitivity under the policy's adjacency."""
        mechanism = query.mechanism
        if not isinstance(mechanism, GaussianMechanism | LaplaceMechanism | NoNoise):
            raise self._refuse(query, f"{type(mechanism).__name__} adds no noise a kernel can use")
        norm = "l1" if isinstance(mechanism, LaplaceMechanism) else "l2"
        declared = declared_sensitivities(mechanism)
        shapes = kernel.output_shapes(query.params, self.dim)
        if len(declared) != len(shapes):
            raise self._refuse(
                query, f"the mechanism has {len(declared)} blocks, the kernel {len(shapes)}"
            )
        actual = kernel.sensitivities(query.params, mechanism.adjacency, norm, self.dim)
        for block, (said, true) in enumerate(zip(declared, actual, strict=True)):
            if true > said * (1 + _SENSITIVITY_SLACK):
                raise self._refuse(
                    query,
                    f"block {block} declares {norm} sensitivity {said:g} but the kernel's "
                    f"clipping guarantees only {true:g}",
                )
        own = kernel.sensitivities(query.params, self.policy.adjacency, norm, self.dim)
        charged = mechanism.with_sensitivities(own, self.policy.adjacency)
        self._check_noise(query, charged)
        return charged

    def _check_noise(self, query: Query, charged: Mechanism) -> None:
        if isinstance(charged, NoNoise):
            if not charged.is_private and not self.policy.allow_non_private:
                raise self._refuse(query, "a release without noise is not private; the policy "
                                   "allows it only on simulation sites (allow_non_private)")
            return
        if isinstance(charged, GaussianMechanism):
            multiplier = charged.noise_multiplier
        else:
            multiplier = np.inf if charged.sensitivity == 0 else charged.scale / charged.sensitivity
        if multiplier < self.policy.min_noise_multiplier:
            raise self._refuse(
                query,
                f"noise multiplier {multiplier:.4g} is below the policy's minimum "
                f"{self.policy.min_noise_multiplier:g}",
            )

    def _add_noise_shares(
        self, blocks: tuple[np.ndarray, ...], query: Query, num_participants: int
    ) -> tuple[np.ndarray, ...]:
        mechanism, t = query.mechanism, query.collusion_tolerance
        source, sites = self._noise_source, num_participants
        if isinstance(mechanism, GaussianMechanism):
            return tuple(
                value + gaussian_share(b.sigma, sites, t, value.shape, source)
                for value, b in zip(blocks, mechanism.blocks, strict=True)
            )
        if isinstance(mechanism, LaplaceMechanism):
            return tuple(
                value + laplace_share(mechanism.scale, sites, t, value.shape, source)
                for value in blocks
            )
        return tuple(np.array(value, dtype=np.float64) for value in blocks)
