"""The algorithms as estimators (scikit-learn's shape): the public API.

Hyperparameters in ``__init__``, ``fit(federation, public_source=None)``
returning ``self``, fitted state in attributes ending in ``_`` (``coef_``,
``history_``, ``privacy_``, ``noise_multiplier_``, ...), ``predict`` /
``score`` for the linear models, ``get_params`` / ``set_params`` / ``clone``
for model selection. The solver functions of ``privadapt.server.algorithms``
do the work; the estimators validate and call them by keyword.
"""

from privadapt.server.estimators.base import (
    InvalidParameterError,
    NotFittedError,
    PrivateEstimator,
    clone,
)
from privadapt.server.estimators.confidence_boosting import ConfidenceBoosting
from privadapt.server.estimators.discrepancy import PrivateDiscrepancy
from privadapt.server.estimators.discrepancy_minimization import PrivateDiscrepancyMinimization
from privadapt.server.estimators.frank_wolfe import DPFrankWolfe, DPFrankWolfeTransfer
from privadapt.server.estimators.gradient_descent import NoisyGD, NoisySGD
from privadapt.server.estimators.grid_search import PrivateGridSearch
from privadapt.server.estimators.output_perturbation import OutputPerturbation
from privadapt.server.estimators.private_kmeans import PrivateLloydKMeans
from privadapt.server.estimators.private_mixture import PrivateGaussianMixtureSampler
from privadapt.server.estimators.reweighting import PCnvxAdap, PNCnvxAdap
from privadapt.server.estimators.selected_adaptation import SelectedAdaptation
from privadapt.server.estimators.selection import PrivateSelection
from privadapt.server.estimators.source_target_clustering import (
    NeighborNoisyAverages,
    NoisyAverageSet,
)

__all__ = [
    "ConfidenceBoosting",
    "DPFrankWolfe",
    "DPFrankWolfeTransfer",
    "InvalidParameterError",
    "NeighborNoisyAverages",
    "NoisyAverageSet",
    "NoisyGD",
    "NoisySGD",
    "NotFittedError",
    "OutputPerturbation",
    "PCnvxAdap",
    "PNCnvxAdap",
    "PrivateDiscrepancy",
    "PrivateDiscrepancyMinimization",
    "PrivateEstimator",
    "PrivateGaussianMixtureSampler",
    "PrivateGridSearch",
    "PrivateLloydKMeans",
    "PrivateSelection",
    "SelectedAdaptation",
    "clone",
]
