"""Checks of a job against its sites, before anything is spent."""

import math

import pytest

from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.jobs.launch_checks import (
    check_delta_against_sizes,
    check_estimator,
    check_schema_agreement,
)
from privadapt.server.jobs.spec import validate_spec

SCHEMA = Schema(label="y", numeric=("a",), categorical={"c": ("x", "y")},
                label_map={"no": -1.0, "yes": 1.0})
GOOD = SchemaDigest.of(SCHEMA, 3)
FLIPPED = SchemaDigest.of(Schema(label="y", numeric=("a",), categorical={"c": ("y", "x")},
                                 label_map={"no": 1.0, "yes": -1.0}), 3)


def spec(delta=1e-6, **fields) -> pb.JobSpec:
    return pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=delta, **fields)


def test_delta_at_or_above_one_over_the_smallest_public_n_is_refused():
    with pytest.raises(ConfigError, match=r"delta = 0.005 is not below 1/n = 0.005 of site "
                                          r"'small' \(n = 200 records.*such as 1e-6"):
        check_delta_against_sizes(spec(0.005), {"big": 5000, "small": 200, "private": 0})


def test_delta_below_one_over_n_and_private_sizes_pass():
    check_delta_against_sizes(spec(0.004), {"big": 5000, "small": 200})
    check_delta_against_sizes(spec(0.5), {"private": 0})


def test_large_job_delta_needs_allow_large_delta():
    with pytest.raises(ConfigError, match=r"delta = 0.5 is 0.001 or more.*set \[job\] "
                                          r"allow_large_delta = true if you mean it"):
        validate_spec(spec(0.5))
    validate_spec(spec(0.5, allow_large_delta=True))


def test_schema_disagreement_names_the_site_and_first_field_against_the_public_sample():
    with pytest.raises(ConfigError) as refused:
        check_schema_agreement(GOOD, {"site-a": GOOD, "site-b": FLIPPED, "site-c": GOOD})
    message = str(refused.value)
    assert "compared with the coordinator's public sample" in message
    assert "site 'site-b' differs in 'categorical.c' (also: 'label_map'" in message
    assert "site-a" not in message and "site-c" not in message


def test_without_a_public_sample_the_majority_is_the_reference():
    with pytest.raises(ConfigError, match=r"compared with site 'site-a': site 'site-c' "
                                          r"differs in 'categorical.c'"):
        check_schema_agreement(None, {"site-a": GOOD, "site-b": GOOD, "site-c": FLIPPED})


def test_agreeing_sites_and_plain_arrays_of_the_same_dimension_pass():
    check_schema_agreement(GOOD, {"site-a": GOOD, "site-b": GOOD})
    check_schema_agreement(SchemaDigest.of(None, 3), {"site-a": GOOD})


def test_plain_arrays_of_another_dimension_are_named_as_plain():
    with pytest.raises(ConfigError, match=r"site 'p' \(plain arrays, no schema file\) differs "
                                          r"in 'dimension'"):
        check_schema_agreement(GOOD, {"p": SchemaDigest.of(None, 4)})


def test_a_site_without_a_digest_is_refused():
    with pytest.raises(ConfigError, match=r"site\(s\) 'old' registered no schema digest"):
        check_schema_agreement(None, {"old": None, "new": GOOD})


def _gd(**hyper) -> tuple[pb.JobSpec, dict]:
    values = {"loss": "logistic", "iterations": 3, "learning_rate": 1.0, "radius": 1.0,
              "clip_norm": 1.0, **hyper}
    job = spec()
    params_to_proto(values, job.hyperparameters)
    return job, values


def test_the_estimators_own_checks_run_at_launch():
    job, values = _gd()
    check_estimator(job, values, has_public_source=False)
    job.delta, job.epsilon = 0.0, 1.0
    with pytest.raises(ConfigError, match="parameter 'delta' must be > 0 when epsilon is finite"):
        check_estimator(job, values, has_public_source=False)


def test_a_noisy_gd_job_centred_at_source_only_needs_the_public_sample():
    job, values = _gd()
    centred = {**values, "center": "source_only"}
    with pytest.raises(ConfigError, match="noisy_gd needs the public source sample"):
        check_estimator(job, centred, has_public_source=False)
    check_estimator(job, centred, has_public_source=True)
    check_estimator(job, values, has_public_source=False)


def test_a_job_needing_the_public_sample_is_refused_without_one():
    job = pb.JobSpec(algorithm="pncnvx_adap", epsilon=math.inf, delta=1e-6)
    values = {"alpha": 0.5, "iterations": 2, "feature_norm": 1.0, "label_bound": 1.0,
              "radius": 5.0, "l1": 0.01, "l2": 0.01, "linf": 0.01, "mu": 100.0,
              "discrepancy": 0.05, "step_scale": 100.0}
    with pytest.raises(ConfigError, match="pncnvx_adap needs the public source sample"):
        check_estimator(job, values, has_public_source=False)
