"""LocalFederation with its sites in Ray actors (a local Ray instance)."""

import subprocess
import sys

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.errors import BudgetExceededError
from privadapt.common.mechanisms import GaussianMechanism

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

DIM = 4


def datasets(count: int, seed: int = 0) -> list[Dataset]:
    rng = np.random.default_rng(seed)
    return [Dataset(rng.normal(size=(30, DIM)) / 2, np.where(rng.random(30) < 0.5, -1.0, 1.0))
            for _ in range(count)]


def fitted(backend: str, **options) -> tuple:
    """NoisyGD's weights, every site's spend and budget statement, and one
    per-site release from two of the sites."""
    with LocalFederation.from_datasets(datasets(5), epsilon_cap=10.0, delta_cap=1e-5,
                                       noise_seed=7, job_id="job-1", backend=backend,
                                       **options) as federation:
        model = NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=4,
                        learning_rate=1.0, radius=5.0, clip_norm=1.0).fit(federation)
        per_site = federation.query_per_site(
            "linear_gradient", {"weights": model.coef_, "loss": "logistic", "clip_norm": 1.0},
            GaussianMechanism.single(2.0, 1.0), sites=["site-4", "site-2"])
        return (model.coef_, federation.privacy_spent(), federation.site_budgets(),
                per_site.answers)


def test_sites_in_ray_actors_compute_and_charge_as_in_process_at_a_fixed_noise_seed(
        ray_instance):
    here = fitted("in-process")
    placed = fitted("ray", actors=2)
    np.testing.assert_array_equal(placed[0], here[0])
    assert placed[1] == here[1]
    assert placed[2] == here[2]
    assert placed[3].keys() == here[3].keys() == {"site-2", "site-4"}
    for name, blocks in here[3].items():
        for mine, theirs in zip(placed[3][name], blocks, strict=True):
            np.testing.assert_array_equal(mine, theirs)


def test_a_site_in_an_actor_refuses_over_its_cap_with_its_own_error(ray_instance):
    with (LocalFederation.from_datasets(datasets(3), epsilon_cap=0.5, delta_cap=1e-5,
                                        backend="ray", actors=2) as federation,
          pytest.raises(BudgetExceededError)):
        federation.query("linear_gradient",
                         {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0},
                         GaussianMechanism.single(2.0, 0.01))


def test_each_sites_ledger_is_kept_on_its_actors_node_under_the_ledger_dir(
        ray_instance, tmp_path):
    with LocalFederation.from_datasets(datasets(3), epsilon_cap=10.0, delta_cap=1e-5,
                                       ledger_dir=tmp_path, backend="ray",
                                       actors=2) as federation:
        federation.query("linear_gradient",
                         {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0},
                         GaussianMechanism.single(2.0, 5.0))
        with pytest.raises(AttributeError, match="Ray actors"):
            _ = federation.sites
    names = sorted(path.name for path in tmp_path.glob("*.ledger.db"))
    assert names == ["site-1.ledger.db", "site-2.ledger.db", "site-3.ledger.db"]
    reopened = LocalFederation.from_datasets(datasets(3), epsilon_cap=10.0, delta_cap=1e-5,
                                             ledger_dir=tmp_path)
    assert all(s.epsilon_spent > 0 for s in reopened.site_budgets().values())
    reopened.close()


def test_neither_privadapt_nor_a_site_daemon_nor_the_demo_imports_ray():
    code = ("import sys, privadapt, privadapt.client.local_federation, "
            "privadapt.client.daemon.main, privadapt.cli.main, privadapt.simulation.simulate; "
            "print('ray' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "False"
