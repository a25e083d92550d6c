"""The candidates of :class:`~.selected_adaptation.SelectedAdaptation`: which
learners a job can name, how a candidate list is checked, each candidate
built at its budget, and the validation losses' clip ``loss_bound="auto"``.

Kept apart from the estimator so that the estimator's module holds its plan,
fit and guarantee only; everything here is a function of public settings.

The clip L (``loss_bound``). The margin grows with L (sigma = z sqrt(K) L),
so a worst-case L wastes the selection: on the synthetic regression the
losses are about 0.01 and L = 1 kept the source-only model at epsilon 10,
n = 2000, where the oracle's choice has half its MSE. ``"auto"`` sets L to
the 95th percentile of the source-only model's per-record losses on the
public source: a function of public data only, so the release's sensitivity
(L per record, the kernel's) and the selection's guarantee
(selected_adaptation.py) are unchanged. Records whose loss exceeds L count
as L, which understates the badness of a model that fails on them (the
shift may make source-only such a model): the selection then errs towards
keeping candidate 0, the safe side.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import numpy as np

from privadapt.common.losses import loss_values
from privadapt.server.estimators.base import Constraint, InvalidParameterError, PrivateEstimator
from privadapt.server.estimators.gradient_descent import NoisyGD
from privadapt.server.estimators.reweighting import PCnvxAdap, PNCnvxAdap

SOURCE_ONLY = "source_only"
# Every candidate a job can name, in a fixed order: model_arrays reports the
# candidates as positions in this tuple (the wire carries numbers only), so it
# only ever grows at the end.
CANDIDATE_IDS = (SOURCE_ONLY, "noisy_gd", "pcnvx_adap", "pcnvx_adap_smooth", "pncnvx_adap",
                 "pncnvx_adap_smooth")
DEFAULT_CANDIDATES = "noisy_gd,pncnvx_adap_smooth"
# loss_bound="auto" (auto_loss_bound): a quantile of the free model's public losses.
AUTO_LOSS_QUANTILE = 0.95
MIN_AUTO_LOSS_BOUND = 1e-6
# PCnvxAdap minimises the squared loss only.
_SQUARED_ONLY = frozenset({"pcnvx_adap", "pcnvx_adap_smooth"})
# The reweighting adapters: each site keeps their weights u as job state
# (common/kernels/reweighted_chains.py), one chain per adapter. Each runs on
# the chain named after its candidate id (ids are valid, distinct chain
# names), so two adapters in one job never touch each other's weights; at
# most 4 chains, within the site's 16 per job.


def parse_candidates(text: str, loss: str, who: str = "SelectedAdaptation") -> list[str]:
    """The named private candidates of ``text`` ("a,b,c"), in order, or
    InvalidParameterError naming the first bad one (with the closest known name)."""
    names = [name.strip() for name in text.split(",")]
    known = CANDIDATE_IDS[1:]
    if not names or any(not name for name in names):
        raise InvalidParameterError(f"{who}: parameter 'candidates' must be a comma-separated "
                                    f"list of names among {list(known)}; got {text!r}")
    for name in names:
        if name == SOURCE_ONLY:
            raise InvalidParameterError(f"{who}: {SOURCE_ONLY!r} is always candidate 0 (it is "
                                        "free); name only the private candidates")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidParameterError(f"{who}: unknown candidate {name!r}{hint}; known: "
                                        f"{list(known)}")
        if name in _SQUARED_ONLY and loss != "squared":
            raise InvalidParameterError(f"{who}: candidate {name!r} needs loss 'squared' "
                                        f"(PCnvxAdap's F is a squared loss); got {loss!r}")
    if len(set(names)) != len(names):
        raise InvalidParameterError(f"{who}: parameter 'candidates' names a learner twice: "
                                    f"{text!r}")
    return names


class CandidateList(Constraint):
    """A comma-separated string of known candidate names (a job's
    hyperparameter is a scalar; ``fit`` says which name is wrong and why)."""

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        names = [name.strip() for name in value.split(",")]
        return (all(name in CANDIDATE_IDS[1:] for name in names)
                and len(set(names)) == len(names))

    @property
    def wire_types(self) -> tuple[type, ...]:
        return (str,)

    def __str__(self) -> str:
        return f"a comma-separated list of distinct names among {list(CANDIDATE_IDS[1:])}"


def candidate_learner(name: str, settings: Mapping[str, Any], epsilon: float,
                      delta: float) -> PrivateEstimator:
    """The unfitted candidate ``name`` at the budget (``epsilon``, ``delta``),
    with the learning settings of a SelectedAdaptation's ``get_params()``."""
    if name == "noisy_gd":
        return NoisyGD(loss=settings["loss"], epsilon=epsilon, delta=delta,
                       iterations=settings["iterations"], learning_rate=settings["learning_rate"],
                       radius=settings["radius"], clip_norm=settings["clip_norm"],
                       calibration=settings["calibration"])
    penalty = settings["penalty"]
    shared = {"alpha": settings["alpha"], "epsilon": epsilon, "delta": delta,
              "feature_norm": settings["feature_norm"], "label_bound": settings["label_bound"],
              "radius": settings["radius"], "iterations": settings["adapter_iterations"],
              "mu": settings["mu"], "step_scale": settings["step_scale"],
              "calibration": settings["calibration"], "chain": name,
              "step_sizes": "noise_aware_smooth" if name.endswith("_smooth")
              else "noise_aware"}
    if name.startswith("pcnvx_adap"):
        return PCnvxAdap(k1=penalty, k2=penalty, kinf=penalty, **shared)
    return PNCnvxAdap(loss=settings["loss"], l1=penalty, l2=penalty, linf=penalty,
                      seed=settings["seed"], **shared)


def auto_loss_bound(loss: str, source_only: np.ndarray, features: np.ndarray,
                    labels: np.ndarray) -> float:
    """L = the ``AUTO_LOSS_QUANTILE`` quantile of the source-only model's
    per-record losses on the public source (at least ``MIN_AUTO_LOSS_BOUND``):
    computed from public data only, so it is a public parameter of the
    release and costs nothing (selected_adaptation's module docstring)."""
    losses = loss_values(loss, np.asarray(features, float) @ source_only,
                         np.asarray(labels, float))
    return max(float(np.quantile(losses, AUTO_LOSS_QUANTILE)), MIN_AUTO_LOSS_BOUND)
