"""``import privadapt``: the researcher's names, loaded lazily."""

import subprocess
import sys

import pytest

import privadapt

EXPECTED = {"ConfidenceBoosting", "DPFrankWolfe", "DPFrankWolfeTransfer",
            "Dataset", "InvalidParameterError", "LocalFederation", "NeighborNoisyAverages",
            "NoisyAverageSet", "NoisyGD", "NoisySGD", "NotFittedError", "OutputPerturbation",
            "PCnvxAdap", "PNCnvxAdap", "PrivadaptError", "PrivateDiscrepancy",
            "PrivateDiscrepancyMinimization", "PrivateGaussianMixtureSampler",
            "PrivateGridSearch", "PrivateLloydKMeans", "PrivateSelection", "Schema",
            "SelectedAdaptation",
            "SitePolicy", "SitePrivacy", "clone", "load_adult_domains", "parts_of_one_job"}


def test_every_exported_name_resolves():
    assert set(privadapt.__all__) == EXPECTED
    from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD

    assert privadapt.NoisyGD is NoisyGD
    assert all(getattr(privadapt, name) is not None for name in privadapt.__all__)
    assert set(dir(privadapt)) == EXPECTED  # no helper (importlib, Any) leaks
    with pytest.raises(AttributeError, match="no attribute 'noisy_gd'"):
        _ = privadapt.noisy_gd


def test_importing_a_role_package_does_not_load_the_coordinators_code():
    code = ("import sys, privadapt.client.site, privadapt.common.kernels; "
            "print(sorted(m for m in sys.modules if m.startswith('privadapt.server')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_every_estimator_a_user_can_fit_is_exported():
    import importlib
    import pkgutil

    from privadapt.server import algorithms
    from privadapt.server.algorithms.base import PrivateEstimator

    for module in pkgutil.walk_packages(algorithms.__path__, algorithms.__name__ + "."):
        importlib.import_module(module.name)
    fittable, pending = set(), [PrivateEstimator]
    while pending:
        for subclass in pending.pop().__subclasses__():
            pending.append(subclass)
            if not subclass.__name__.startswith("_"):
                fittable.add(subclass.__name__)
    assert fittable <= set(privadapt.__all__), sorted(fittable - set(privadapt.__all__))
