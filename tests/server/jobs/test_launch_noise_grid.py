"""A job whose plan holds a release too noisy for the fixed-point grid is
refused at launch and dry run, naming the release, instead of by every site
at that round after the rounds before it were charged."""

from __future__ import annotations

import pytest

from privadapt.common.errors import ConfigError
from privadapt.common.noise.floating import max_grid_safe_noise
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.jobs.launch_checks import check_noise_grid, plan_job
from privadapt.server.jobs.spec import hyperparameters

SITES = ("site-a", "site-b")
RECORDS, DIM = 1000, 3


def _sessions():
    registry = SiteRegistry()
    for name in SITES:
        registry.register(name, pb.RegisterRequest(
            site_name=name, num_features=DIM, adjacency="replace_one", num_records=RECORDS,
            budget=pb.SiteBudget(epsilon_cap=10.0, delta_cap=1e-5, epsilon_spent=0.0,
                                 accounting="pld")))
    return registry.sessions()


def _plan(epsilon: float):
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=epsilon, delta=1e-6, sites=SITES,
                      min_participants=2)
    params_to_proto({"iterations": 20, "radius": 5.0, "loss": "logistic",
                     "learning_rate": 0.5, "clip_norm": 1.0}, spec.hyperparameters)
    return plan_job(spec, hyperparameters(spec), _sessions(), None)


def test_a_release_too_noisy_for_the_grid_is_refused_at_launch_naming_it():
    # epsilon 1e-4 over 20 gradient releases of sensitivity 2: sigma ~ 5e5,
    # above the 2^-32 grid's 2^20 / 100.
    with pytest.raises(ConfigError, match=r"release 1 \(linear_gradient, secure_sum\) would "
                                          r"add noise of scale .* fixed-point grid 2\^-32"):
        _plan(1e-4)


def test_a_plan_within_the_grid_passes():
    plan = _plan(1.0)
    assert plan.releases
    check_noise_grid(plan.releases, FixedPointCodec(), DIM)


def test_the_check_reads_the_codecs_grid():
    releases = _plan(1.0).releases
    sigma = max(release.mechanism.noise_scales[0] for release in releases)
    fine = next(bits for bits in range(32, 53) if max_grid_safe_noise(bits) < sigma)
    with pytest.raises(ConfigError, match=f"grid 2\\^-{fine}"):
        check_noise_grid(releases, FixedPointCodec(fine), DIM)
