"""model.npz names its features from the schema the job's parties agreed on
whenever the coordinator holds that schema (its public_source_schema, with or
without a public sample), and says when the names are placeholders and why."""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError
from privadapt.server.coordinator.main import _schema_names
from privadapt.server.jobs.result_files import model_features, write_model
from tests.paths import DEPLOY_DIR

ADULT = Schema.from_toml(DEPLOY_DIR / "adult.schema.toml")
DIM = len(ADULT.feature_names())


def test_the_agreed_schemas_names_name_the_model_without_a_public_sample():
    known = _schema_names(ADULT)  # the coordinator's public_source_schema alone
    agreed = SchemaDigest.of(ADULT, DIM)  # what every site with that schema registers
    features = model_features(agreed, DIM, known)
    assert features.names == ADULT.feature_names() and features.schema_digest == agreed.digest
    assert features.source.startswith("schema: the schema the parties agreed on")


def test_a_schema_the_coordinator_does_not_hold_gives_placeholders_saying_what_to_do():
    features = model_features(SchemaDigest.of(ADULT, DIM), DIM, {})
    assert features.names == tuple(f"x{j}" for j in range(DIM))
    assert features.source.startswith("placeholder: the coordinator holds no schema")
    assert "public_source_schema" in features.source


@pytest.mark.parametrize("agreed, why", [
    (SchemaDigest.of(None, 4), "plain arrays without a schema file"),
    (None, "agreed on no schema digest"),
])
def test_nothing_naming_the_features_gives_placeholders_and_says_so(agreed, why):
    features = model_features(agreed, 4, _schema_names(ADULT))
    assert features.names == ("x0", "x1", "x2", "x3") and why in features.source


def test_the_model_file_keeps_where_its_names_come_from(tmp_path):
    features = model_features(SchemaDigest.of(None, 2), 2, {})
    path = write_model(tmp_path, "job-1", {"weights": np.ones(2)}, features.schema_digest,
                       features.names, features.source)
    with np.load(path, allow_pickle=False) as model:
        assert str(model["feature_names_source"]) == features.source
    with pytest.raises(ConfigError, match="keeps for its metadata"):
        write_model(tmp_path, "job-1", {"feature_names_source": np.ones(1)}, "", [])
