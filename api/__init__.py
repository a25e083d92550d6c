"""privadapt: federated, differentially private domain adaptation.

What a researcher needs, from one import::

    import privadapt as pa

    domains = pa.load_adult_domains(num_sites=3)
    federation = pa.LocalFederation.from_datasets(domains.target_sites,
                                                  epsilon_cap=5.0, delta_cap=1e-5)
    model = pa.NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=60,
                       learning_rate=3.0, radius=20.0, clip_norm=1.0).fit(federation)

On your own files: ``schema = pa.Schema.infer("public.csv", label="outcome")``
(from the coordinator's public file only), then ``pa.Dataset.from_csv(path,
schema)`` or ``pa.Dataset.from_parquet(path, schema)`` per site.

The roles live in subpackages (``privadapt.common``, ``privadapt.client``,
``privadapt.server``; DESIGN.md section 4). Names here are imported on first
use, so a site daemon importing ``privadapt.common`` or ``privadapt.client``
never loads the coordinator's code through this package.
"""

import importlib as _importlib
import os as _os

# gRPC's C core writes its own lines to stderr (a refused TLS handshake, every
# retry) unless told otherwise before it loads: every privadapt process
# explains such failures in its own one-line log instead
# (common/secure/dial_diagnosis.py). GRPC_VERBOSITY set in the environment
# (DEBUG, INFO, ERROR) still shows them.
_os.environ.setdefault("GRPC_VERBOSITY", "NONE")

# name -> the module that defines it (the one list of what `import privadapt` offers)
_EXPORTS = {
    "NoisyGD": "privadapt.server.algorithms.gradient_descent.estimators",
    "NoisySGD": "privadapt.server.algorithms.gradient_descent.estimators",
    "PCnvxAdap": "privadapt.server.algorithms.reweighting.estimators",
    "PNCnvxAdap": "privadapt.server.algorithms.reweighting.estimators",
    "PrivateDiscrepancy": "privadapt.server.algorithms.discrepancy.estimators",
    "PrivateDiscrepancyMinimization":
        "privadapt.server.algorithms.discrepancy_minimization.estimators",
    "PrivateSelection": "privadapt.server.algorithms.model_selection.selection",
    "PrivateGridSearch": "privadapt.server.algorithms.model_selection.grid_search",
    "ConfidenceBoosting": "privadapt.server.algorithms.model_selection.confidence_boosting",
    "SelectedAdaptation": "privadapt.server.algorithms.model_selection.selected_adaptation",
    "OutputPerturbation": "privadapt.server.algorithms.output_perturbation.estimators",
    "DPFrankWolfe": "privadapt.server.algorithms.frank_wolfe.estimators",
    "DPFrankWolfeTransfer": "privadapt.server.algorithms.frank_wolfe.estimators",
    "NeighborNoisyAverages": "privadapt.server.algorithms.source_target_clustering.estimators",
    "NoisyAverageSet": "privadapt.server.algorithms.source_target_clustering.estimators",
    "PrivateLloydKMeans": "privadapt.server.algorithms.source_target_clustering.private_kmeans",
    "PrivateGaussianMixtureSampler":
        "privadapt.server.algorithms.source_target_clustering.private_mixture_sampler",
    "clone": "privadapt.server.algorithms.base",
    "parts_of_one_job": "privadapt.server.algorithms.base",
    "InvalidParameterError": "privadapt.server.algorithms.base",
    "NotFittedError": "privadapt.server.algorithms.base",
    "LocalFederation": "privadapt.client.local_federation",
    "SitePolicy": "privadapt.client.policy",
    "Dataset": "privadapt.common.data.dataset",
    "Schema": "privadapt.common.data.schema",
    "load_adult_domains": "privadapt.common.data.datasets.adult",
    "SitePrivacy": "privadapt.common.federation",
    "PrivadaptError": "privadapt.common.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'privadapt' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    # What a user can use: the exports, not this module's own helpers.
    return list(__all__)
