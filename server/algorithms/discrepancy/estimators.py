"""The private discrepancy estimate d_DP of seed 000 (Section 4) as an estimator.

Over ``server/algorithms/discrepancy/private_discrepancy.py`` (the derivation, the OCR reading and
the accounting are there): ``method="federated"`` is one Gaussian release of
the private second moments from any number of sites (needs ``delta``);
``method="single_holder"`` is the paper's d-hat + Laplace at the one site that
holds the whole private sample (pure epsilon-DP; ``delta`` then only chooses
where the ledgers' spend is reported).
"""

from __future__ import annotations

from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    DELTA,
    EPSILON,
    POSITIVE,
    Options,
    PrivateEstimator,
    PublicSource,
    fit_context,
    hyperparameter,
    require_public_arrays,
)
from privadapt.server.algorithms.discrepancy.private_discrepancy import (
    federated_discrepancy,
    single_holder_discrepancy,
)

_ROUTES = {"federated": federated_discrepancy, "single_holder": single_holder_discrepancy}


class PrivateDiscrepancy(PrivateEstimator):
    """d_DP between the public source and the federation's private target for
    the squared loss and ||w|| <= ``radius``, records clipped to ||x|| <=
    ``feature_norm``, |y| <= ``label_bound``; ``epsilon`` is this step's budget
    (Alg. 1 gives it half of its own; inf: the exact d-hat, simulation sites only).

    Fitted: ``discrepancy_`` (d_DP in [0, B]), ``loss_bound_`` (B), ``estimate_``
    (the full ``DiscrepancyEstimate``: noise scale, mechanism, noisy moments),
    ``privacy_`` (each site's ledger)."""

    requires_public_source = True
    epsilon: float = hyperparameter(EPSILON)
    delta: float | None = hyperparameter([*DELTA, None], default=None)
    radius: float = hyperparameter(POSITIVE)
    feature_norm: float = hyperparameter(POSITIVE)
    label_bound: float = hyperparameter(POSITIVE)
    method: str = hyperparameter([Options(*_ROUTES)], default="federated")

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: PublicSource | None = None
            ) -> PrivateDiscrepancy:
        """Estimate d_DP from ``public_source`` (a Dataset or (features, labels);
        required) and one release from the federation's sites."""
        features, labels = require_public_arrays(public_source, type(self).__name__)
        # The route checks what spans arguments (delta for the Gaussian, one site
        # for the single holder) before it queries anything.
        estimate = _ROUTES[self.method](
            federation, features, labels, epsilon=self.epsilon, delta=self.delta,
            radius=self.radius, feature_norm=self.feature_norm, label_bound=self.label_bound)
        self.estimate_ = estimate
        self.discrepancy_ = estimate.value
        self.loss_bound_ = estimate.loss_bound
        self.privacy_ = estimate.privacy
        return self
