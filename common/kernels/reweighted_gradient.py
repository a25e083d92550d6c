"""Site side of PCnvxAdap / PNCnvxAdap (seed 000, Alg. 1 and Alg. 2): the private
part of the reweighted objective, with each record's weight u_i kept at the site.

Notation (seed 000, Section 4): n private records in all (over every site,
public under replace-one adjacency), alpha the source mixture weight, q_i = 1/u_i
the weight of record i, constrained to u_i >= n / (1 - alpha). Data bounds
||x|| <= r, |y| <= Y and model bound ||w|| <= Lambda are job parameters; every
record is clipped to them here, so the bounds below hold for any record and
any ``weights`` sent:

* squared loss: per-record loss <= B = (Lambda r + Y)^2, gradient norm
  <= G = 2 r (Lambda r + Y) (Section 4);
* logistic loss log(1 + exp(-y w.x)): B = log(1 + exp(Lambda r Y)), G = r Y;
* softmax cross-entropy of W in R^{d x C} (``num_classes`` C, labels class
  indices 0..C-1, ``weights`` W flattened row-major, ||W||_F <= Lambda):
  B = log(1 + (C-1) exp(sqrt(2) Lambda r)), G = sqrt(2) r, derived in
  :mod:`privadapt.common.kernels.softmax_loss`. The site refuses the query if
  any of its labels is not such an index (it does not trust its data).
  (Losses are also clipped to [0, B] and gradients to norm G, in case the
  coordinator sends ||w|| > Lambda.)

One query, at iteration ``step`` t, with the coordinator's w_t and the global
aggregates S_t = sum_i 1/u_i^2 and log Z_t = log sum_i exp(mu/u_i) at u_t:

released blocks (secure sum, distributed Gaussian shares), each rescaled by a
public factor so that its sensitivity is O(1) and the fixed-point grid (2^-32)
does not dominate it:

0. sum_i clip_G(grad l(w_t; x_i, y_i)) * (lower / u_i)  with lower = n/(1-alpha):
   the private part of grad_w F times n/(1-alpha); L2 sensitivity 2G (replace
   one), G (add/remove); i.e. 2(1-alpha)G/n unscaled (Lemma 1 (ii));
1. sum_i (lower / u_i)^2 at u_{t+1}: the private part of S_{t+1} times
   (n/(1-alpha))^2; each term in (0, 1], sensitivity 1;
2. sum_i exp(mu (1/u_i - 1/lower)) at u_{t+1}: the private part of Z_{t+1}
   times exp(-mu (1-alpha)/n); each term in (0, 1], sensitivity 1;

local block (noised at the site at full sigma, never released):

3. l_i (lower / u_i)^2 per record: the loss part of grad_{u^Priv} F times
   -(n/(1-alpha))^2; each coordinate in [0, B] and one record moves only its
   own, so L2 sensitivity B, i.e. (1-alpha)^2 B / n^2 unscaled (Lemma 1 (iii)).

The site then takes the projected step of Alg. 1 lines 10-11,
u_{t+1} = max(u_t - eta (g_t + z_t), n/(1-alpha)), with g_t the full gradient
of the u-terms (the noised loss part plus the penalty terms of
:func:`penalty_gradient`, which need only u_i and the public S_t, Z_t).

``weight_noise = false`` drops the local block: the site updates u with the
exact loss part. The releases stay (epsilon, delta)-DP: given everything
released so far, u_i for every record but the changed one is the same on
neighbouring datasets, and each released block's sensitivity holds for any
value of that one record's u_j >= n/(1-alpha) (the tests check exactly this),
so adaptive composition applies with u as hidden state. Alg. 1 needs the
u-noise because it publishes u; here u never leaves the site.

Retries: the networked federation may re-send a step under a new query id
after a site dropped out. The state keeps u_t, the weights before the step
last applied, and restarts from it when that step arrives again, so an update
is never applied twice. Steps must otherwise arrive in order 0, 1, 2, ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    clip_coefficients,
    clip_rows_to_norm,
    positive_param,
    register,
)
from privadapt.common.kernels.linear_gradient import loss_derivative, weights_param
from privadapt.common.kernels.local_blocks import KernelWithLocalBlocks
from privadapt.common.kernels.softmax_loss import (
    SOFTMAX_CROSS_ENTROPY,
    class_indices,
    num_classes_param,
    softmax_cross_entropy_bounds,
    softmax_record_terms,
)
from privadapt.common.mechanisms import Adjacency

OBJECTIVES = ("convex", "smooth")
LOSSES = ("squared", "logistic", SOFTMAX_CROSS_ENTROPY)
_STATE_KEY = "reweighted_gradient"
_PENDING_GRADIENT = "pending_weight_gradient"
_PENDING_LOSSES = "pending_scaled_losses"


def loss_values(loss: str, margins: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """l(w; x, y) from the margin w.x: (w.x - y)^2 or log(1 + exp(-y w.x))."""
    if loss == "squared":
        return (margins - labels) ** 2
    return np.logaddexp(0.0, -labels * margins)


def loss_bounds(
    loss: str, feature_norm: float, label_bound: float, radius: float, num_classes: int = 2
) -> tuple[float, float]:
    """(B, G): bounds on the loss and on its gradient norm in w over
    ||x|| <= r, |y| <= Y, ||w|| <= Lambda (seed 000, Section 4 for the squared loss);
    ``num_classes`` is read by the softmax cross-entropy only."""
    if loss == SOFTMAX_CROSS_ENTROPY:
        return softmax_cross_entropy_bounds(feature_norm, radius, num_classes)
    if loss == "squared":
        reach = radius * feature_norm + label_bound
        return reach**2, 2.0 * feature_norm * reach
    return float(np.logaddexp(0.0, radius * feature_norm * label_bound)), feature_norm * label_bound


def penalty_gradient(
    u: np.ndarray,
    *,
    objective: str,
    k1: float,
    k1_coefficient: float,
    k2: float,
    kinf: float,
    mu: float,
    inverse_square_sum: float,
    log_partition: float,
) -> np.ndarray:
    """Gradient in u of the penalty terms of F (6) or J (7) at coordinates ``u``.

    * sum term: F's k1 (c sum_i u_i - 1) gives k1 c with c = ``k1_coefficient``
      (alpha^2/m^2 public, (1-alpha)^2/n^2 private); J's l1 (1 - sum_i 1/u_i)
      gives l1 / u_i^2;
    * k2 (sum_j 1/u_j^2)^(1/2) gives -k2 / (u_i^3 sqrt(S)), S = ``inverse_square_sum``;
    * kinf (1/mu) log sum_j exp(mu/u_j) gives -kinf softmax_i / u_i^2 with
      softmax_i = exp(mu/u_i - log Z), log Z = ``log_partition``. (F's exact
      kinf / min_j u_j is replaced by this softmax in the federated algorithm;
      see ``privadapt.server.algorithms.cnvx_adap``.)
    """
    inverse = 1.0 / u
    inverse_squared = inverse * inverse
    if objective == "convex":
        gradient = np.full_like(u, k1 * k1_coefficient)
    else:
        gradient = k1 * inverse_squared
    if k2 > 0:
        gradient -= k2 * inverse_squared * inverse / math.sqrt(inverse_square_sum)
    if kinf > 0:
        gradient -= kinf * np.exp(mu * inverse - log_partition) * inverse_squared
    return gradient


def _nonnegative_param(params: Mapping[str, Any], key: str) -> float:
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"parameter {key!r} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"parameter {key!r} must be finite and >= 0, got {value!r}")
    return float(value)


def _finite_param(params: Mapping[str, Any], key: str) -> float:
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"parameter {key!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"parameter {key!r} must be finite, got {value!r}")
    return float(value)


def _integer_param(params: Mapping[str, Any], key: str, minimum: int) -> int:
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"parameter {key!r} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _weight_noise(params: Mapping[str, Any]) -> bool:
    """Whether the u-gradient is a noised local block (Alg. 1 line 10; the default)."""
    value = params.get("weight_noise", True)
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"parameter 'weight_noise' must be a bool, got {value!r}")
    return bool(value)


def _alpha(params: Mapping[str, Any]) -> float:
    alpha = _finite_param(params, "alpha")
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"parameter 'alpha' must be in [0, 1), got {alpha!r}")
    return alpha


def _lower_bound(params: Mapping[str, Any]) -> float:
    """n / (1 - alpha): the least u_i of a private record (Section 4, problem (6))."""
    return _integer_param(params, "total_private_records", 1) / (1.0 - _alpha(params))


@register
class ReweightedGradient(KernelWithLocalBlocks):
    """The private part of grad F (or grad J) with per-record weights kept at the site.

    params: ``weights`` (d,) (softmax cross-entropy: (d C,), W flattened
    row-major), ``step`` t, ``objective`` in {"convex", "smooth"}, ``loss`` in
    {"squared", "logistic", "softmax_cross_entropy"} (the last with
    ``num_classes`` C >= 2), ``alpha``, ``total_private_records`` n,
    ``feature_norm`` r, ``label_bound`` Y, ``radius`` Lambda, ``k1``, ``k2``,
    ``kinf`` (>= 0), ``mu`` (> 0), ``inverse_square_sum`` S_t (> 0),
    ``log_partition`` log Z_t, ``step_size`` eta of the u update, and
    optionally ``weight_noise`` (default true).
    """

    name = "reweighted_gradient"

    def validate_params(self, params: Mapping[str, Any], dim: int) -> None:
        for key, allowed in (("objective", OBJECTIVES), ("loss", LOSSES)):
            if params.get(key) not in allowed:
                raise ValueError(
                    f"parameter {key!r} must be one of {allowed}, got {params.get(key)!r}"
                )
        weights_param(params, _model_size(params, dim))
        _integer_param(params, "step", 0)
        _lower_bound(params)
        for key in ("feature_norm", "label_bound", "radius", "mu", "inverse_square_sum",
                    "step_size"):
            positive_param(params, key)
        for key in ("k1", "k2", "kinf"):
            _nonnegative_param(params, key)
        _finite_param(params, "log_partition")
        _weight_noise(params)

    def output_shapes(self, params: Mapping[str, Any], dim: int) -> tuple[tuple[int, ...], ...]:
        return ((_model_size(params, dim),), (1,), (1,))

    def _bounds(self, params: Mapping[str, Any]) -> tuple[float, float]:
        loss = params["loss"]
        return loss_bounds(
            loss,
            positive_param(params, "feature_norm"),
            positive_param(params, "label_bound"),
            positive_param(params, "radius"),
            num_classes_param(params) if loss == SOFTMAX_CROSS_ENTROPY else 2,
        )

    def l2_sensitivities(
        self, params: Mapping[str, Any], adjacency: Adjacency
    ) -> tuple[float, ...]:
        _, gradient_bound = self._bounds(params)
        replace = adjacency == Adjacency.REPLACE_ONE
        # Each scaled term is at most G (block 0) or in (0, 1] (blocks 1, 2): two
        # such terms differ by at most 2G and 1; one term alone is at most G and 1.
        return (2.0 * gradient_bound if replace else gradient_bound, 1.0, 1.0)

    def local_block_shapes(
        self, params: Mapping[str, Any], num_records: int
    ) -> tuple[tuple[int, ...], ...]:
        return ((num_records,),) if _weight_noise(params) else ()

    def local_l2_sensitivities(
        self, params: Mapping[str, Any], adjacency: Adjacency
    ) -> tuple[float, ...]:
        # One record moves only its own coordinate, which lies in [0, B].
        loss_bound, _ = self._bounds(params)
        return (loss_bound,) if _weight_noise(params) else ()

    def clip_bounds(self, params: Mapping[str, Any]) -> dict[str, float]:
        return {
            "clip_norm": positive_param(params, "feature_norm"),
            "label_bound": positive_param(params, "label_bound"),
        }

    def max_abs_sum(self, params: Mapping[str, Any], num_records: int) -> float:
        _, gradient_bound = self._bounds(params)
        return num_records * max(gradient_bound, 1.0)

    def compute_local(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        if params["loss"] == SOFTMAX_CROSS_ENTROPY:
            # Refuse (ValueError) before touching the state: labels come from the data.
            class_indices(data.labels, num_classes_param(params))
        own = self._begin_step(state, _integer_param(params, "step", 0), data.num_records,
                               _lower_bound(params))
        u_now = np.maximum(own["u_before"], _lower_bound(params))
        gradient_sum, scaled_losses = self._per_record_terms(data, params, u_now)
        own[_PENDING_GRADIENT] = gradient_sum
        if _weight_noise(params):
            return (scaled_losses,)
        own[_PENDING_LOSSES] = scaled_losses  # applied without noise (module docstring)
        return ()

    def apply_local(
        self,
        data: Dataset,
        params: Mapping[str, Any],
        state: MutableMapping[str, Any],
        noised_blocks: tuple[np.ndarray, ...],
    ) -> None:
        own = state[_STATE_KEY]
        lower = _lower_bound(params)
        u_now = np.maximum(own["u_before"], lower)
        (noised_losses,) = noised_blocks if noised_blocks else (own.pop(_PENDING_LOSSES),)
        penalty = penalty_gradient(
            u_now,
            objective=params["objective"],
            k1=_nonnegative_param(params, "k1"),
            k1_coefficient=1.0 / lower**2,
            k2=_nonnegative_param(params, "k2"),
            kinf=_nonnegative_param(params, "kinf"),
            mu=positive_param(params, "mu"),
            inverse_square_sum=positive_param(params, "inverse_square_sum"),
            log_partition=_finite_param(params, "log_partition"),
        )
        gradient = penalty - noised_losses / lower**2
        step_size = positive_param(params, "step_size")
        own["u"] = np.maximum(u_now - step_size * gradient, lower)

    def compute(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        own = state[_STATE_KEY]
        lower = _lower_bound(params)
        mu = positive_param(params, "mu")
        ratio = lower / np.maximum(own["u"], lower)  # (n/(1-alpha)) q_i, in (0, 1]
        inverse_squares = float(np.sum(ratio * ratio))
        # exp(mu (q_i - 1/lower)) = exp(mu/lower (ratio - 1)), each in (0, 1].
        partition = float(np.sum(np.exp((mu / lower) * (ratio - 1.0))))
        return (own.pop(_PENDING_GRADIENT), np.array([inverse_squares]), np.array([partition]))

    @staticmethod
    def _begin_step(
        state: MutableMapping[str, Any], step: int, num_records: int, lower: float
    ) -> MutableMapping[str, Any]:
        """Make ``u_before`` the weights at the start of ``step``: the current
        ones for the next step, the kept snapshot for a retried one."""
        own = state.setdefault(_STATE_KEY, {})
        if not own:
            if step != 0:
                raise ValueError(
                    f"this site has no weights for the job yet: expected step 0, got {step}"
                )
            own.update(u=np.full(num_records, lower), next_step=0)
        if step == own["next_step"]:
            own["u_before"] = own["u"].copy()
            own["next_step"] = step + 1
        elif step == own["next_step"] - 1:
            own["u"] = own["u_before"].copy()  # retried step: restart from its snapshot
        else:
            raise ValueError(
                f"step {step} out of order: the site's weights are at step {own['next_step']}"
            )
        return own

    def _per_record_terms(
        self, data: Dataset, params: Mapping[str, Any], u_now: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(sum_i clip_G(grad l_i) lower/u_i, [min(l_i, B) (lower/u_i)^2]_i)."""
        if params["loss"] == SOFTMAX_CROSS_ENTROPY:
            num_classes = num_classes_param(params)
            weights = weights_param(params, data.dim * num_classes)
            return softmax_record_terms(
                data.features, class_indices(data.labels, num_classes),
                weights.reshape(data.dim, num_classes), _lower_bound(params) / u_now,
                positive_param(params, "feature_norm"), *self._bounds(params))
        weights = weights_param(params, data.dim)
        feature_norm = positive_param(params, "feature_norm")
        label_bound = positive_param(params, "label_bound")
        loss = params["loss"]
        loss_bound, gradient_bound = self._bounds(params)
        lower = _lower_bound(params)
        gradient_sum = np.zeros(data.dim)
        scaled_losses = np.empty(data.num_records)
        for start in range(0, data.num_records, CHUNK_RECORDS):
            chunk = slice(start, start + CHUNK_RECORDS)
            features = clip_rows_to_norm(data.features[chunk], feature_norm)
            labels = np.clip(data.labels[chunk], -label_bound, label_bound)
            ratio = lower / u_now[chunk]
            with np.errstate(over="ignore", invalid="ignore"):
                margins = features @ weights
                losses = np.minimum(loss_values(loss, margins, labels), loss_bound)
                coefficients = loss_derivative(loss, margins, labels)
            clipped = clip_coefficients(coefficients, features, gradient_bound)
            # A record whose loss overflows contributes zero: keeps the loss bound.
            losses[~np.isfinite(losses)] = 0.0
            gradient_sum += features.T @ (clipped * ratio)
            scaled_losses[chunk] = losses * ratio * ratio
        return gradient_sum, scaled_losses


def _model_size(params: Mapping[str, Any], dim: int) -> int:
    """Entries of the model: d, or d C for the softmax cross-entropy."""
    if params.get("loss") == SOFTMAX_CROSS_ENTROPY:
        return dim * num_classes_param(params)
    return dim
