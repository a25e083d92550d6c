"""exact_discrepancy's a posteriori certificate through the real ``Site.answer``:
adversarial public moments (the hard case, a near-hard case, tied and
clustered top eigenvalues, huge and tiny scales, d up to 100) still answer on
both neighbours within the charged sensitivity; and when the certificate fails
(an eigen-solver corrupted on purpose) the site refuses in words that depend
on nothing private, releases and charges nothing, and keeps the kernel
disabled afterwards (across restarts too: tests/client/ledger/test_kernel_latch.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import DISABLED_KERNEL_REASON, Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec

NUM = 12
FRACTIONAL_BITS = 48
KERNEL = get_kernel("exact_discrepancy")
_LEDGERS = itertools.count()


def adversarial_case(kind: str, dim: int, r: float, y: float) -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """(public moments, features, labels): records orthogonal to (or nearly
    along) the public moments' top direction e_1, so that n M_pub - S has a top
    eigenvector that the linear term misses: the trust region's hard case."""
    rng = np.random.default_rng(dim)
    features = rng.normal(size=(NUM, dim))
    features[:, 0] = {"hard": 0.0, "near_hard": 1e-9}.get(kind, features[:, 0])
    features *= r / np.linalg.norm(features, axis=1)[:, None]
    labels = y * np.clip(rng.normal(size=NUM), -1, 1)
    public = np.zeros((dim + 1, dim + 1))
    if kind in ("hard", "near_hard"):
        public[0, 0] = r * r
    elif kind == "ties":
        k = max(1, dim // 2)
        public[:k, :k] = np.eye(k) * r * r / k
    elif kind == "clustered":
        spread = 1.0 + np.arange(dim) * 1e-12
        public[:dim, :dim] = np.diag(spread / spread.sum()) * r * r
    else:  # a rank-one public sample at the clip boundary, labels at Y
        z = np.append(np.full(dim, r / math.sqrt(dim)), y)
        public = np.outer(z, z)
    public[-1, -1] = max(public[-1, -1], y * y / 2)
    return public, features, labels


def policy_for(adjacency: Adjacency) -> SitePolicy:
    # A small public bound on n keeps add/remove's range check within the grid.
    return SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True,
                      max_records=2 * NUM)


def site(tmp_path, data: Dataset, adjacency: Adjacency) -> Site:
    policy = policy_for(adjacency)
    path = tmp_path / f"ledger-{next(_LEDGERS)}.db"
    return Site(data, policy, PrivacyLedger(path, policy, create=True))


def query(params: dict, adjacency: Adjacency, dim: int, tag: str = "a",
          bits: int = FRACTIONAL_BITS) -> Query:
    mechanism = KERNEL.mechanism(KERNEL.Params.from_wire(params, dim), math.inf, adjacency,
                                 dim=dim)
    return Query("job", f"q-{tag}", "exact_discrepancy", params, mechanism,
                 fractional_bits=bits)


def neighbours(features, labels, adjacency: Adjacency, r: float, y: float):
    dim = features.shape[1]
    names = tuple(f"x{i}" for i in range(dim))
    extreme = np.zeros(dim)
    extreme[0] = r  # along the top direction: the largest change of the loss
    if adjacency == Adjacency.REPLACE_ONE:
        other_x, other_y = features.copy(), labels.copy()
        other_x[0], other_y[0] = extreme, -y
    else:
        other_x, other_y = np.vstack([features, extreme]), np.append(labels, -y)
    return Dataset(features, labels, names), Dataset(other_x, other_y, names)


CASES = [pytest.param(kind, dim, scale, marks=[pytest.mark.slow] if dim > 30 else [])
         for kind in ("hard", "near_hard", "ties", "clustered", "rank_one")
         for dim in (3, 30, 100) for scale in (2.0**-60, 1.0, 2.0**60)]


def kernel_release(data: Dataset, params: dict, dim: int) -> float:
    (value,) = KERNEL.compute(data, KERNEL.Params.from_wire(params, dim), {})
    return float(value[0])


@pytest.mark.parametrize(("kind", "dim", "scale"), CASES)
def test_adversarial_moments_answer_within_the_charge(tmp_path, kind, dim, scale):
    r, y, radius = scale, scale / 2, 1e3  # a large radius: deep in the hard case
    public, features, labels = adversarial_case(kind, dim, r, y)
    params = {"feature_norm": r, "label_bound": y, "radius": radius, "public_moments": public}
    typed = KERNEL.Params.from_wire(params, dim)
    bits = FRACTIONAL_BITS if scale < 1 else 16  # the grid that holds the range
    for adjacency in Adjacency:
        records = policy_for(adjacency).range_records(NUM + 1)
        pair = neighbours(features, labels, adjacency, r, y)
        # The kernel's own float releases: within the sensitivity plus twice
        # the charged computation error (each side's certified error).
        (sensitivity,) = KERNEL.l2_sensitivities(typed, adjacency)
        (error,) = KERNEL.computation_errors(typed, dim, records)
        moved = abs(kernel_release(pair[0], params, dim) - kernel_release(pair[1], params, dim))
        assert moved <= sensitivity + 2 * error
        # Through the site, on the grid: answered alike or refused alike.
        (bound,) = KERNEL.charged_sensitivities(typed, adjacency, "l1", dim, bits, records)
        codec = FixedPointCodec(bits)
        outcomes = []
        for tag, data in zip("ab", pair, strict=True):
            try:
                share = site(tmp_path, data, adjacency).answer(
                    query(params, adjacency, dim, tag, bits), 1)
            except QueryRefusedError as err:  # the range check, on public sizes
                outcomes.append(str(err).replace("q-b", "q-a"))
                continue
            outcomes.append(float(codec.decode(share.blocks[0])[0]))
        if isinstance(outcomes[0], str) or isinstance(outcomes[1], str):
            assert outcomes[0] == outcomes[1] and scale > 1
        else:
            assert abs(outcomes[0] - outcomes[1]) <= bound


def corrupt_lapack(monkeypatch) -> None:
    """eigh and cholesky as if LAPACK had a backward error of 1e-3 (relative):
    outside the floating-point model, which is what makes a certificate fail."""
    honest_eigh, honest_cholesky = np.linalg.eigh, np.linalg.cholesky

    def eigh(matrix, *args, **kwargs):
        values, vectors = honest_eigh(matrix, *args, **kwargs)
        noise = np.random.default_rng(0).normal(size=vectors.shape)
        return values * (1 - 1e-3), vectors + 1e-3 * noise

    def cholesky(matrix, *args, **kwargs):
        factor = honest_cholesky(matrix, *args, **kwargs)
        return factor * (1 + 1e-3 * np.random.default_rng(1).normal(size=factor.shape))

    monkeypatch.setattr(np.linalg, "eigh", eigh)
    monkeypatch.setattr(np.linalg, "cholesky", cholesky)


@pytest.mark.parametrize("adjacency", list(Adjacency))
def test_a_failed_certificate_refuses_in_public_words_and_disables_the_kernel(
        tmp_path, monkeypatch, adjacency):
    dim, r, y = 4, 1.0, 1.0
    public, features, labels = adversarial_case("near_hard", dim, r, y)
    params = {"feature_norm": r, "label_bound": y, "radius": 3.0, "public_moments": public}
    sites = [site(tmp_path, data, adjacency)
             for data in neighbours(features, labels, adjacency, r, y)]
    corrupt_lapack(monkeypatch)
    messages = []
    for each in sites:
        with pytest.raises(QueryRefusedError) as refused:
            each.answer(query(params, adjacency, dim), 1)
        messages.append(str(refused.value))
    # The same words on both neighbours, naming only the query and the site.
    assert messages[0] == messages[1]
    assert DISABLED_KERNEL_REASON in messages[0]
    assert not any(character.isdigit() for character in DISABLED_KERNEL_REASON)
    monkeypatch.undo()  # the libraries are honest again: the latch still holds
    for each in sites:
        assert each.disabled_kernels == {"exact_discrepancy"}
        with pytest.raises(QueryRefusedError) as again:
            each.answer(query(params, adjacency, dim, "later"), 1)
        assert str(again.value) == messages[0].replace("q-a", "q-later")
        assert each.ledger.charges("job") == []  # nothing charged, nothing released
        # Other kernels still answer.
        second = {"feature_norm": r, "label_bound": y}
        found = get_kernel("second_moments")
        mechanism = found.mechanism(found.Params.from_wire(second, dim), math.inf, adjacency,
                                    dim=dim)
        each.answer(Query("job", "q-other", "second_moments", second, mechanism,
                          fractional_bits=FRACTIONAL_BITS), 1)
