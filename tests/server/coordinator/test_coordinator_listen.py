"""A coordinator refuses to share its port, and ``listen`` must name one:
gRPC's default SO_REUSEPORT let a second coordinator
bind a port already in use, and the two then answered calls alternately; a
``listen`` without a port silently meant port 443."""

from __future__ import annotations

import dataclasses

import pytest

from privadapt.common.errors import ConfigError
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig, check_listen_address
from tests.network_harness import make_pki, write_coordinator_config


@pytest.mark.parametrize("listen", ["0.0.0.0", "localhost", "::1", "[::1]", "host:port",
                                    "127.0.0.1:65536", "127.0.0.1:", ""])
def test_listen_without_a_valid_port_is_a_config_error(listen):
    with pytest.raises(ConfigError, match="has no port"):
        check_listen_address(listen)


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "127.0.0.1:0", "[::]:50051",
                                    "localhost:8443", "unix:/tmp/coordinator.sock"])
def test_listen_with_a_port_is_accepted(listen):
    check_listen_address(listen)


def test_config_file_with_a_portless_listen_is_refused(tmp_path):
    config = CoordinatorConfig.from_toml(write_coordinator_config(tmp_path, make_pki(
        tmp_path / "pki", ("site-a",))))
    with pytest.raises(ConfigError, match="has no port"):
        dataclasses.replace(config, listen="0.0.0.0")


def test_second_coordinator_on_a_port_in_use_refuses_to_start(tmp_path):
    config = CoordinatorConfig.from_toml(write_coordinator_config(tmp_path, make_pki(
        tmp_path / "pki", ("site-a",))))
    first = Coordinator(config, insecure=True)
    first.start()
    try:
        taken = dataclasses.replace(config, listen=f"127.0.0.1:{first.port}",
                                    database=tmp_path / "second.db")
        with pytest.raises(ConfigError, match="in use"):
            Coordinator(taken, insecure=True)
    finally:
        first.stop(0)
