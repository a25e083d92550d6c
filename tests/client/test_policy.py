"""SitePolicy: the operator's TOML file, read once, with errors naming file and key."""

import math
from dataclasses import replace

import pytest

from privadapt.client.policy import DEFAULT_MAX_RECORDS, SitePolicy
from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import Adjacency

GOOD_TOML = """
[site]
name = "st-mary"
[privacy]
epsilon_cap = 5.0
delta_cap = 1e-5
adjacency = "replace_one"
accounting = "pld"
min_noise_multiplier = 0.5
collusion_tolerance = 0
min_participants = 2
allow_non_private = false
[queries]
allowed_kernels = ["linear_gradient", "second_moments", "record_count"]
max_clip_norm = 10.0
max_label_bound = 10.0
"""

# A deployed site must state min_participants >= 2 (the default, 1, is for simulations).
MINIMAL = {"site": {"name": "st-mary"},
           "privacy": {"epsilon_cap": 1.0, "delta_cap": 1e-6, "min_participants": 2}}


def write_policy(tmp_path, text):
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def with_key(section, key, value):
    data = {name: dict(table) for name, table in MINIMAL.items()}
    data.setdefault(section, {})[key] = value
    return data


def test_policy_file_sets_every_field(tmp_path):
    policy = SitePolicy.from_toml(write_policy(tmp_path, GOOD_TOML))
    assert policy == SitePolicy(
        site_name="st-mary",
        epsilon_cap=5.0,
        delta_cap=1e-5,
        allowed_kernels=frozenset({"linear_gradient", "second_moments", "record_count"}),
        min_noise_multiplier=0.5,
        collusion_tolerance=0,
        min_participants=2,
        adjacency=Adjacency.REPLACE_ONE,
        accounting=AccountingMethod.PLD,
        max_clip_norm=10.0,
        max_label_bound=10.0,
        allow_non_private=False,
        simulation=False,
    )


def test_omitted_keys_take_the_documented_defaults():
    policy = SitePolicy.from_dict(MINIMAL)
    assert policy.allowed_kernels is None and policy.min_noise_multiplier == 0.0
    assert policy.collusion_tolerance == 0
    assert policy.simulation is False and policy.allow_large_delta is False
    assert policy.adjacency == Adjacency.REPLACE_ONE
    assert policy.accounting == AccountingMethod.PLD
    assert policy.max_clip_norm is None and policy.allow_non_private is False


def test_infinite_cap_is_expressible_in_toml_for_simulation_sites(tmp_path):
    text = GOOD_TOML.replace("epsilon_cap = 5.0", "epsilon_cap = inf").replace(
        "allow_non_private = false", "allow_non_private = true"
    )
    policy = SitePolicy.from_toml(write_policy(tmp_path, text))
    assert math.isinf(policy.epsilon_cap) and policy.allow_non_private


def test_integer_cap_is_accepted_as_a_number():
    assert SitePolicy.from_dict(with_key("privacy", "epsilon_cap", 3)).epsilon_cap == 3.0


def test_missing_policy_file_names_the_file(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=f"policy file {missing}: not found"):
        SitePolicy.from_toml(missing)


def test_malformed_toml_names_the_file(tmp_path):
    path = write_policy(tmp_path, "[site\nname = 1")
    with pytest.raises(ConfigError, match=f"policy file {path}: not valid TOML"):
        SitePolicy.from_toml(path)


def test_unknown_key_names_file_section_key_and_suggests_the_right_one(tmp_path):
    path = write_policy(tmp_path, GOOD_TOML.replace("epsilon_cap", "epsilon_cpa"))
    with pytest.raises(ConfigError) as err:
        SitePolicy.from_toml(path)
    message = str(err.value)
    assert str(path) in message and "unknown key [privacy] epsilon_cpa" in message
    assert "did you mean 'epsilon_cap'" in message


def test_unknown_section_is_refused():
    with pytest.raises(ConfigError, match=r"unknown section \[privacy_settings\]"):
        SitePolicy.from_dict({**MINIMAL, "privacy_settings": {}})


def test_wrong_type_names_file_and_key(tmp_path):
    path = write_policy(tmp_path, GOOD_TOML.replace("epsilon_cap = 5.0", 'epsilon_cap = "5"'))
    with pytest.raises(ConfigError, match=r"\[privacy\] epsilon_cap must be a number, got '5'"):
        SitePolicy.from_toml(path)


def test_boolean_is_not_accepted_as_a_number():
    with pytest.raises(ConfigError, match="delta_cap must be a number"):
        SitePolicy.from_dict(with_key("privacy", "delta_cap", True))


def test_missing_required_key_is_named():
    with pytest.raises(ConfigError, match=r"missing required key \[privacy\] delta_cap"):
        SitePolicy.from_dict({"site": {"name": "a"}, "privacy": {"epsilon_cap": 1.0}})


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("privacy", "epsilon_cap", -1.0, "epsilon_cap must be a number >= 0"),
        ("privacy", "epsilon_cap", float("nan"), "epsilon_cap must be a number >= 0"),
        ("privacy", "delta_cap", 1.0, r"delta_cap must be a number in \[0, 1\)"),
        ("privacy", "adjacency", "replace", "adjacency must be one of 'replace_one'"),
        ("privacy", "accounting", "moments", "accounting must be one of 'pld', 'rdp'"),
        ("privacy", "min_noise_multiplier", -0.1, "min_noise_multiplier must be a finite"),
        ("privacy", "collusion_tolerance", -1, "collusion_tolerance must be a whole number"),
        ("privacy", "min_participants", 0, "min_participants must be a whole number >= 1"),
        ("privacy", "min_participants", 2.5, r"\[privacy\] min_participants must be a whole"),
        ("privacy", "max_records", 0, r"max_records must be a whole number in \[1, 2\^53\)"),
        ("privacy", "max_records", 1e6, r"\[privacy\] max_records must be a whole number"),
        ("queries", "max_clip_norm", 0.0, "max_clip_norm must be a finite number > 0"),
        ("queries", "max_label_bound", float("inf"), "max_label_bound must be a finite"),
        ("queries", "allowed_kernels", "record_count",
         r"\[queries\] allowed_kernels must be a list, got 'record_count'"),
        ("queries", "allowed_kernels", ["linear_gradiant"], "did you mean 'linear_gradient'"),
    ],
)
def test_invalid_value_is_refused_with_an_actionable_message(section, key, value, expected):
    with pytest.raises(ConfigError, match=expected):
        SitePolicy.from_dict(with_key(section, key, value))


def test_non_private_releases_require_an_infinite_cap():
    with pytest.raises(ConfigError, match="requires epsilon_cap = inf"):
        SitePolicy.from_dict(with_key("privacy", "allow_non_private", True))


def test_messages_from_a_file_name_the_site_and_the_file(tmp_path):
    path = write_policy(tmp_path, GOOD_TOML.replace("delta_cap = 1e-5", "delta_cap = 2.0"))
    with pytest.raises(ConfigError, match=f"policy file {path}: site policy 'st-mary': delta_cap"):
        SitePolicy.from_toml(path)


def test_empty_site_name_is_refused():
    with pytest.raises(ConfigError, match="site name must be a non-empty string"):
        SitePolicy(site_name=" ", epsilon_cap=1.0, delta_cap=1e-5)


@pytest.mark.parametrize(("section", "key", "names"),
                         [("queries", "allowed_kernels", "kernel names"),
                          ("federation", "peers", "site names")])
@pytest.mark.parametrize("value", [[["record_count"]], [{"name": "a"}], [1]],
                         ids=["list-of-lists", "list-of-tables", "list-of-numbers"])
def test_a_list_of_anything_but_names_is_refused_in_words(section, key, names, value):
    with pytest.raises(ConfigError, match=rf"\[{section}\] {key} must be a list of {names}"):
        SitePolicy.from_dict(with_key(section, key, value))


def test_allowed_kernels_given_as_a_list_become_a_frozenset():
    policy = SitePolicy("a", 1.0, 1e-5, allowed_kernels=["record_count"])
    assert policy.allowed_kernels == frozenset({"record_count"})


def test_peers_bound_the_roster_to_named_sites_and_the_site_itself(tmp_path):
    path = write_policy(tmp_path, GOOD_TOML + '[federation]\npeers = ["st-john", "st-luke"]\n')
    policy = SitePolicy.from_toml(path)
    assert policy.allowed_roster_names() == {"st-mary", "st-john", "st-luke"}
    assert SitePolicy("st-mary", 1.0, 1e-5).allowed_roster_names() is None
    with pytest.raises(ConfigError, match=r"\[federation\] peers must be a list, got 'st-john'"):
        text = GOOD_TOML + '[federation]\npeers = "st-john"\n'
        SitePolicy.from_toml(write_policy(tmp_path, text))
    with pytest.raises(ConfigError, match="peers must be a list of site names"):
        SitePolicy.from_toml(write_policy(tmp_path, GOOD_TOML + "[federation]\npeers = [3]\n"))


def _reads_back(policy: SitePolicy, tmp_path) -> SitePolicy:
    return SitePolicy.from_toml(write_policy(tmp_path, policy.to_toml()))


def test_to_toml_reads_back_equal_with_every_field_set(tmp_path):
    policy = SitePolicy.from_toml(write_policy(
        tmp_path, GOOD_TOML + '[federation]\npeers = ["st-john", "st-luke"]\n'))
    policy = replace(policy, adjacency=Adjacency.ADD_REMOVE_ONE,
                     accounting=AccountingMethod.RDP, collusion_tolerance=1, max_records=5000)
    assert _reads_back(policy, tmp_path) == policy


def test_to_toml_reads_back_equal_with_optional_fields_absent(tmp_path):
    policy = SitePolicy.from_dict(MINIMAL)
    text = policy.to_toml()
    assert "allowed_kernels" not in text and "[federation]" not in text
    assert _reads_back(policy, tmp_path) == policy


def test_to_toml_of_a_simulation_site_keeps_its_infinite_cap(tmp_path):
    policy = SitePolicy("sim", math.inf, 1e-5, allow_non_private=True, peers=[])
    assert _reads_back(policy, tmp_path) == policy


def test_range_checks_assume_n_where_public_and_the_declared_bound_where_private():
    assert SitePolicy("s", 1.0, 1e-5).range_records(70) == 70
    add_remove = SitePolicy("s", 1.0, 1e-5, adjacency=Adjacency.ADD_REMOVE_ONE)
    assert add_remove.range_records(70) == DEFAULT_MAX_RECORDS
    assert replace(add_remove, max_records=100).range_records(70) == 100


def test_data_larger_than_max_records_is_refused_when_loaded():
    policy = SitePolicy("s", 1.0, 1e-5, adjacency=Adjacency.ADD_REMOVE_ONE, max_records=10)
    with pytest.raises(ConfigError, match=r"more records than max_records = 10"):
        policy.range_records(11)


def test_a_simulation_file_may_omit_min_participants_and_gets_one():
    data = {"site": {"name": "sim", "simulation": True},
            "privacy": {"epsilon_cap": 1.0, "delta_cap": 1e-6}}
    assert SitePolicy.from_dict(data).min_participants == 1


def test_policy_built_in_code_is_a_simulation_site():
    assert SitePolicy("lib", math.inf, 0.5).simulation


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("epsilon_cap", 0.0, r"epsilon_cap = 0 lets this site answer no query at all; write a "
                             r"positive lifetime cap such as epsilon_cap = 3.0"),
        ("epsilon_cap", math.inf, r"epsilon_cap = inf caps nothing; write a finite lifetime cap"),
        ("delta_cap", 0.5, r"delta_cap = 0.5 is 0.001 or more, .* set \[privacy\] "
                           r"allow_large_delta = true if you mean it"),
        ("delta_cap", 1e-3, r"delta_cap = 0.001 is 0.001 or more"),
        ("min_participants", 1, r"min_participants = 1 lets a round of this site alone go ahead"
                                r".* write \[privacy\] min_participants = 2 or more"),
    ],
)
def test_deployed_policy_that_caps_nothing_is_refused_naming_the_key(key, value, expected):
    with pytest.raises(ConfigError, match=expected):
        SitePolicy.from_dict(with_key("privacy", key, value))


def test_deployed_policy_omitting_min_participants_is_refused():
    data = {"site": {"name": "st-mary"}, "privacy": {"epsilon_cap": 1.0, "delta_cap": 1e-6}}
    with pytest.raises(ConfigError, match="min_participants = 1"):
        SitePolicy.from_dict(data)


def test_large_delta_cap_is_accepted_when_allowed_on_purpose():
    data = with_key("privacy", "delta_cap", 0.01)
    data["privacy"]["allow_large_delta"] = True
    assert SitePolicy.from_dict(data).delta_cap == 0.01


@pytest.mark.parametrize(("key", "value"), [("epsilon_cap", 0.0), ("epsilon_cap", math.inf),
                                            ("delta_cap", 0.5), ("min_participants", 1)])
def test_simulation_site_keeps_the_values_tests_and_simulations_use(key, value):
    data = with_key("privacy", key, value)
    data["site"]["simulation"] = True
    assert getattr(SitePolicy.from_dict(data), key) == value


def test_deployed_site_may_not_release_exact_sums():
    data = with_key("privacy", "epsilon_cap", math.inf)
    data["privacy"]["allow_non_private"] = True
    data["site"]["simulation"] = False
    with pytest.raises(ConfigError, match="epsilon_cap = inf caps nothing"):
        SitePolicy.from_dict(data)


def test_simulation_flag_round_trips_through_toml(tmp_path):
    deployed = SitePolicy.from_dict(MINIMAL)
    assert _reads_back(deployed, tmp_path) == deployed
    assert _reads_back(SitePolicy("sim", math.inf, 1e-5), tmp_path).simulation
