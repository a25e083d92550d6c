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
  :mod:`privadapt.common.losses`. A record whose label is not such an
  index contributes zero to both terms (loss 0, gradient 0): within [0, B] and
  [0, G], so the sensitivities below cover it. The kernel never refuses on
  its data: a refusal is an uncharged release, and one that depended on the
  labels would tell neighbouring datasets apart (asking C = 2, 3, ... would
  reveal the largest label). Check labels against the schema when the data
  is loaded. (Losses are also clipped to [0, B] and gradients to norm G, in case the
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
:func:`privadapt.common.losses.penalty_gradient`, which need only u_i and the public S_t, Z_t).

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

Chains: one job may run several descents, each with its own u, named by the
public parameter ``chain`` (:mod:`privadapt.common.kernels.reweighted_chains`:
the layout in the job's state, the record part, privacy, and the bound on
chains per job and on the state's size). The empty default is the job's
original descent and keeps the wire encoding of a query without it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum
from privadapt.common.kernels.reweighted_chains import (
    MAX_CHAINS,
    chain_names,
    chain_state,
    check_chain,
    open_chain_state,
)
from privadapt.common.kernels.reweighted_terms import binary_record_terms, softmax_record_terms
from privadapt.common.losses import (
    LOSSES,
    OBJECTIVES,
    SOFTMAX_CROSS_ENTROPY,
    Loss,
    Objective,
    loss_bounds,
    masked_class_indices,
    penalty_gradient,
)
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import (
    check_bool,
    check_finite,
    check_finite_array,
    check_int_at_least,
    check_nonnegative_finite,
    check_one_of,
    check_positive_finite,
    check_probability,
    frozen_value,
)

_PENDING_GRADIENT = "pending_weight_gradient"
_PENDING_LOSSES = "pending_scaled_losses"
_REQUIRED = ("weights", "step", "objective", "loss", "alpha", "total_private_records",
             "feature_norm", "label_bound", "radius", "k1", "k2", "kinf", "mu",
             "inverse_square_sum", "log_partition", "step_size")
_CLIP = ("feature_norm", "label_bound", "radius")
_POSITIVE = ("mu", "inverse_square_sum", "step_size")
# The largest u step eta |g| a query may imply (penalty_bound): u stays finite
# for every admitted query and the noise a site adds.
_MAX_STEP = 2.0**500


@frozen_value(eq=False, kw_only=True)
class ReweightedGradientParams(KernelParams):
    """One step's query (module docstring): ``weights`` w (d,) (softmax
    cross-entropy: W (d C,) flattened row-major, with ``num_classes`` C >= 2),
    ``step`` t, ``objective`` in {"convex", "smooth"}, ``loss``, ``alpha`` in
    [0, 1), ``total_private_records`` n, the clip region ``feature_norm`` r,
    ``label_bound`` Y, ``radius`` Lambda, the penalty weights ``k1``, ``k2``,
    ``kinf`` (>= 0), ``mu`` (> 0), the global aggregates ``inverse_square_sum``
    S_t (> 0) and ``log_partition`` log Z_t, the u step ``step_size`` eta,
    ``weight_noise`` (the local block; default true) and ``chain`` (the
    descent the step belongs to, module docstring; default "", the job's
    original one)."""

    weights: np.ndarray
    step: int
    objective: Objective
    loss: Loss
    alpha: float
    total_private_records: int
    feature_norm: float
    label_bound: float
    radius: float
    k1: float
    k2: float
    kinf: float
    mu: float
    inverse_square_sum: float
    log_partition: float
    step_size: float
    weight_noise: bool = True
    num_classes: int = 2
    chain: str = ""

    def __post_init__(self) -> None:
        def name(key: str) -> str:
            return f"parameter {key!r}"

        check_one_of(name("objective"), self.objective, OBJECTIVES)
        check_one_of(name("loss"), self.loss, LOSSES)
        self.num_classes = check_int_at_least(name("num_classes"), self.num_classes, 2)
        self.weights = readonly(check_finite_array(name("weights"), self.weights, (None,)))
        if self.weights.size % self.model_columns:
            raise ValueError(f"parameter 'weights' must hold d x {self.num_classes} entries, "
                             f"got {self.weights.size}")
        self.step = check_int_at_least(name("step"), self.step, 0)
        self.total_private_records = check_int_at_least(
            name("total_private_records"), self.total_private_records, 1)
        self.alpha = check_probability(name("alpha"), self.alpha, allow_zero=True)
        for key in _CLIP:
            setattr(self, key, check_bound(name(key), getattr(self, key)))
        for key in _POSITIVE:
            setattr(self, key, check_positive_finite(name(key), getattr(self, key)))
        for key in ("k1", "k2", "kinf"):
            setattr(self, key, check_nonnegative_finite(name(key), getattr(self, key)))
        self.log_partition = check_finite(name("log_partition"), self.log_partition)
        self.weight_noise = check_bool(name("weight_noise"), self.weight_noise)
        self.chain = check_chain(self.chain)
        step = self.step_size * self.penalty_bound
        if not step <= _MAX_STEP:  # also NaN
            raise ValueError(
                f"parameters 'step_size', 'k1', 'k2', 'kinf', 'mu', 'inverse_square_sum' and "
                f"'log_partition' allow a u step of {step:.3g}, above 2^500: the weights "
                f"would overflow")

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> ReweightedGradientParams:
        values = wire_values(params, _REQUIRED)
        if check_one_of("parameter 'loss'", values["loss"], LOSSES) == SOFTMAX_CROSS_ENTROPY:
            values["num_classes"] = check_int_at_least(
                "parameter 'num_classes'", params.get("num_classes"), 2)
        for optional in ("weight_noise", "chain"):
            if optional in params:
                values[optional] = params[optional]
        size = dim * values.get("num_classes", 1)
        values["weights"] = check_finite_array("parameter 'weights'", values["weights"], (size,))
        return cls(**values)

    def to_wire(self) -> dict[str, Any]:
        wire = {key: getattr(self, key) for key in _REQUIRED}
        wire["weight_noise"] = self.weight_noise
        if self.loss == SOFTMAX_CROSS_ENTROPY:
            wire["num_classes"] = self.num_classes
        if self.chain:  # the default chain keeps the wire (and digest) of old queries
            wire["chain"] = self.chain
        return wire

    @property
    def model_columns(self) -> int:
        """C for the softmax cross-entropy's W (d x C), 1 for w (d,)."""
        return self.num_classes if self.loss == SOFTMAX_CROSS_ENTROPY else 1

    @property
    def lower_bound(self) -> float:
        """n / (1 - alpha): the least u_i of a private record (Section 4, problem (6))."""
        return self.total_private_records / (1.0 - self.alpha)

    @property
    def penalty_bound(self) -> float:
        """A bound on |gradient in u_i| without the noise, for any u_i >= lower
        (so 1/u_i <= 1/lower <= 1), from the terms of
        :func:`privadapt.common.losses.penalty_gradient` and the loss part B/lower^2;
        inf when a term overflows. Public: the params alone."""
        lower = self.lower_bound
        with np.errstate(over="ignore", invalid="ignore"):
            exponent = min(self.mu / lower - self.log_partition, 1000.0)
            return float(self.k1 + self.k2 / np.sqrt(self.inverse_square_sum)
                         + self.kinf * np.exp(exponent) + self.bounds[0] / lower**2)

    @property
    def bounds(self) -> tuple[float, float]:
        """(B, G): the per-record loss and gradient-norm bounds of the clip region."""
        return loss_bounds(self.loss, self.feature_norm, self.label_bound, self.radius,
                           self.num_classes)


@register
class ReweightedGradient(Kernel):
    """The private part of grad F (or grad J) with per-record weights kept at the site."""

    name = "reweighted_gradient"
    Params = ReweightedGradientParams
    per_record_state = True

    def output_shapes(
        self, params: ReweightedGradientParams, dim: int
    ) -> tuple[tuple[int, ...], ...]:
        return ((dim * params.model_columns,), (1,), (1,))

    def l2_sensitivities(
        self, params: ReweightedGradientParams, adjacency: Adjacency
    ) -> tuple[float, ...]:
        _, gradient_bound = params.bounds
        replace = adjacency == Adjacency.REPLACE_ONE
        # Each scaled term is at most G (block 0) or in (0, 1] (blocks 1, 2): two
        # such terms differ by at most 2G and 1; one term alone is at most G and 1.
        return (2.0 * gradient_bound if replace else gradient_bound, 1.0, 1.0)

    def local_block_shapes(
        self, params: ReweightedGradientParams, num_records: int
    ) -> tuple[tuple[int, ...], ...]:
        return ((num_records,),) if params.weight_noise else ()

    def local_l2_sensitivities(
        self, params: ReweightedGradientParams, adjacency: Adjacency
    ) -> tuple[float, ...]:
        # One record moves only its own coordinate, which lies in [0, B].
        loss_bound, _ = params.bounds
        return (loss_bound,) if params.weight_noise else ()

    def clip_bounds(self, params: ReweightedGradientParams) -> dict[str, float]:
        return {"clip_norm": params.feature_norm, "label_bound": params.label_bound}

    def max_abs_sum(self, params: ReweightedGradientParams, num_records: int) -> float:
        _, gradient_bound = params.bounds
        return num_records * max(gradient_bound, 1.0)

    def compute_local(
        self, data: Dataset, params: ReweightedGradientParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        lower = params.lower_bound
        own = self._begin_step(state, params, data.num_records)
        u_now = np.fmax(own["u_before"], lower)
        gradient_sum, scaled_losses = self._per_record_terms(data, params, u_now)
        own[_PENDING_GRADIENT] = gradient_sum
        if params.weight_noise:
            return (scaled_losses,)
        own[_PENDING_LOSSES] = scaled_losses  # applied without noise (module docstring)
        return ()

    def apply_local(
        self,
        data: Dataset,
        params: ReweightedGradientParams,
        state: MutableMapping[str, Any],
        noised_blocks: tuple[np.ndarray, ...],
    ) -> None:
        own = chain_state(state, params.chain)
        lower = params.lower_bound
        u_now = np.fmax(own["u_before"], lower)
        (noised_losses,) = noised_blocks if noised_blocks else (own.pop(_PENDING_LOSSES),)
        penalty = penalty_gradient(
            u_now, objective=params.objective, k1=params.k1, k1_coefficient=1.0 / lower**2,
            k2=params.k2, kinf=params.kinf, mu=params.mu,
            inverse_square_sum=params.inverse_square_sum, log_partition=params.log_partition,
        )
        with np.errstate(over="ignore", invalid="ignore"):
            gradient = penalty - noised_losses / lower**2
            stepped = u_now - params.step_size * gradient
        # Admitted params keep every term finite (penalty_bound); whatever the
        # noise, u stays in [lower, inf] and never NaN (fmax drops a NaN), and
        # u = inf is a weight of 0: each block's bound holds for any u >= lower.
        own["u"] = np.fmax(stepped, lower)

    def compute(
        self, data: Dataset, params: ReweightedGradientParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        own = chain_state(state, params.chain)
        lower, mu = params.lower_bound, params.mu
        ratio = lower / np.fmax(own["u"], lower)  # (n/(1-alpha)) q_i, in [0, 1]
        # Both sums exact: one record moves them by its own term.
        inverse_squares = ExactSum((1,))
        inverse_squares.add_terms((ratio * ratio)[:, None], 1.0)
        # exp(mu (q_i - 1/lower)) = exp(mu/lower (ratio - 1)), each in [0, 1].
        partition = ExactSum((1,))
        partition.add_terms(np.exp((mu / lower) * (ratio - 1.0))[:, None], 1.0)
        return (own.pop(_PENDING_GRADIENT), inverse_squares.value(), partition.value())

    def check_state(
        self, params: ReweightedGradientParams, state: Mapping[str, Any]
    ) -> None:
        """Refuse a step the chain's weights are not at (the site asks before
        it reads any record or charges): step 0 on a new chain, else the next
        step or a retry of the last one; and a new chain beyond ``MAX_CHAINS``
        of the job. Depends only on the job's earlier queries."""
        own = chain_state(state, params.chain)
        step = params.step
        label = f"chain {params.chain!r}" if params.chain else "the job"
        if not own:
            if step != 0:
                raise ValueError(
                    f"this site has no weights for {label} yet: expected step 0, got {step}"
                )
            if len(chain_names(state)) >= MAX_CHAINS:
                raise ValueError(
                    f"this job already runs {MAX_CHAINS} reweighting chains at this site, the "
                    f"most one job may hold; cannot start chain {params.chain!r}")
        elif step not in (own["next_step"], own["next_step"] - 1):
            raise ValueError(
                f"step {step} out of order: the site's weights are at step {own['next_step']}"
            )

    def _begin_step(
        self, state: MutableMapping[str, Any], params: ReweightedGradientParams,
        num_records: int,
    ) -> MutableMapping[str, Any]:
        """Make ``u_before`` the weights at the start of ``step``: the current
        ones for the next step, the kept snapshot for a retried one."""
        self.check_state(params, state)
        step = params.step
        own = open_chain_state(state, params.chain)
        if not own:
            own.update(u=np.full(num_records, params.lower_bound), next_step=0)
        if step == own["next_step"]:
            own["u_before"] = own["u"].copy()
            own["next_step"] = step + 1
        else:  # a retried step (check_state): restart from its snapshot
            own["u"] = own["u_before"].copy()
        return own

    @staticmethod
    def _per_record_terms(
        data: Dataset, params: ReweightedGradientParams, u_now: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(sum_i clip_G(grad l_i) lower/u_i, [min(l_i, B) (lower/u_i)^2]_i)."""
        ratios = params.lower_bound / u_now
        loss_bound, gradient_bound = params.bounds
        if params.loss == SOFTMAX_CROSS_ENTROPY:
            classes, valid = masked_class_indices(data.labels, params.num_classes)
            # A record whose label is no class index gets ratio 0: zero terms.
            return softmax_record_terms(
                data.features, classes,
                params.weights.reshape(data.dim, params.num_classes), ratios * valid,
                feature_norm=params.feature_norm, loss_bound=loss_bound,
                gradient_bound=gradient_bound)
        return binary_record_terms(
            data.features, data.labels, params.weights, ratios, loss=params.loss,
            feature_norm=params.feature_norm, label_bound=params.label_bound,
            loss_bound=loss_bound, gradient_bound=gradient_bound)

