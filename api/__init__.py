"""privadapt: federated, differentially private domain adaptation.

What a researcher needs, from one import::

    import privadapt as pa

    domains = pa.load_adult_domains(num_sites=3)
    federation = pa.LocalFederation.from_datasets(domains.target_sites,
                                                  epsilon_cap=5.0, delta_cap=1e-5)
    model = pa.NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=60,
                       learning_rate=3.0, radius=20.0, clip_norm=1.0).fit(federation)

The roles live in subpackages (``privadapt.common``, ``privadapt.client``,
``privadapt.server``; DESIGN.md section 4). Names here are imported on first
use, so a site daemon importing ``privadapt.common`` or ``privadapt.client``
never loads the coordinator's code through this package.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it (the one list of what `import privadapt` offers)
_EXPORTS = {
    "NoisyGD": "privadapt.server.estimators",
    "NoisySGD": "privadapt.server.estimators",
    "PCnvxAdap": "privadapt.server.estimators",
    "PNCnvxAdap": "privadapt.server.estimators",
    "PrivateDiscrepancy": "privadapt.server.estimators",
    "PrivateSelection": "privadapt.server.estimators",
    "PrivateGridSearch": "privadapt.server.estimators",
    "DPFrankWolfe": "privadapt.server.estimators",
    "DPFrankWolfeTransfer": "privadapt.server.estimators",
    "clone": "privadapt.server.estimators",
    "InvalidParameterError": "privadapt.server.estimators",
    "NotFittedError": "privadapt.server.estimators",
    "LocalFederation": "privadapt.client.local_federation",
    "SitePolicy": "privadapt.client.policy",
    "Dataset": "privadapt.common.data",
    "load_adult_domains": "privadapt.common.datasets.adult",
    "SitePrivacy": "privadapt.common.federation",
    "PrivadaptError": "privadapt.common.errors",
}
__all__ = sorted(_EXPORTS)

def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'privadapt' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
