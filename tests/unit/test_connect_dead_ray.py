"""A Ray instance that has stopped but left its address behind (Ray's address file, or
RAY_ADDRESS) is found out within seconds: connect() never waits for Ray's own minutes-long
timeout. With no address, a stale address file is ignored and a new local instance started;
an address given, or RAY_ADDRESS, that does not answer raises BrokerNotAvailable naming the
address and what to do. No Ray is started here: ``ray.init`` is replaced by a recorder, and
Ray's temporary directory (which holds the address file) is a test directory, never
/tmp/ray."""

from __future__ import annotations

import logging
import socket
import time

import pytest
import ray

from rafka.actors import service
from rafka.errors import BrokerNotAvailable

# A refused connection answers at once; this bounds the dead-instance checks (the probe's
# own limit is 2 s, for a host that does not answer at all).
FAST_S = 3.0


@pytest.fixture
def ray_tmp(monkeypatch, tmp_path):
    """Ray's temporary directory for this test (Ray reads $RAY_TMPDIR/ray/ray_current_cluster),
    no RAY_ADDRESS, no Ray processes found on this machine, and a ``ray.init`` that records
    its calls instead of starting or joining anything."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # "auto" also looks for GCS processes running here; other Ray work on this machine must
    # not change what the tests see.
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", lambda: set())
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    calls: list[dict] = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    ray_dir = tmp_path / "ray"
    ray_dir.mkdir()
    return ray_dir, calls


@pytest.fixture
def closed_port():
    """A port on every interface that refuses connections: bound (so nothing else takes it
    during the test) but not listening."""
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def open_port():
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def write_address_file(ray_dir, address: str) -> str:
    path = ray_dir / "ray_current_cluster"
    path.write_text(address)
    return str(path)


def test_a_port_nothing_listens_on_is_dead_within_seconds(closed_port):
    started = time.monotonic()
    assert not service.ray_answers(f"127.0.0.1:{closed_port}")
    assert not service.ray_answers(f"ray://127.0.0.1:{closed_port}")
    assert time.monotonic() - started < FAST_S


def test_a_listening_port_is_alive(open_port):
    assert service.ray_answers(f"127.0.0.1:{open_port}")
    assert service.ray_answers(f"ray://127.0.0.1:{open_port}")


def test_an_address_given_that_does_not_answer_raises_naming_it_and_the_fix(
    ray_tmp, closed_port
):
    _, calls = ray_tmp
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailable) as raised:
        service.ensure_ray(f"127.0.0.1:{closed_port}", "ns")
    assert time.monotonic() - started < FAST_S
    message = str(raised.value)
    assert f":{closed_port}" in message and "'127.0.0.1:" in message
    assert "does not answer" in message and "ray start --head" in message
    assert "address of a running Ray cluster" in message
    assert not calls  # ray.init never reached


def test_a_ray_client_address_that_does_not_answer_raises(ray_tmp, closed_port):
    _, calls = ray_tmp
    address = f"ray://127.0.0.1:{closed_port}"
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailable, match=f"Ray instance at {address} does not answer"):
        service.ensure_ray(address, "ns")
    assert time.monotonic() - started < FAST_S
    assert not calls


def test_auto_with_a_stale_address_file_raises_naming_the_file(ray_tmp, closed_port):
    ray_dir, calls = ray_tmp
    path = write_address_file(ray_dir, f"127.0.0.1:{closed_port}")
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailable) as raised:
        service.ensure_ray("auto", "ns")
    assert time.monotonic() - started < FAST_S
    message = str(raised.value)
    assert f":{closed_port} (address 'auto')" in message
    assert f"named by the address file {path}" in message
    assert f"delete the stale file {path}" in message and "rafka up" in message
    assert not calls


def test_ray_address_env_that_does_not_answer_raises_naming_the_variable(
    ray_tmp, closed_port, monkeypatch
):
    _, calls = ray_tmp
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port}")
    for address in (None, "auto"):  # RAY_ADDRESS stands for both, as in ray.init
        with pytest.raises(BrokerNotAvailable) as raised:
            service.ensure_ray(address, "ns")
        message = str(raised.value)
        assert "named by the RAY_ADDRESS environment variable" in message
        assert "unset RAY_ADDRESS" in message
    assert not calls


def test_embedded_with_a_stale_address_file_starts_a_new_local_instance(
    ray_tmp, closed_port, caplog
):
    ray_dir, calls = ray_tmp
    path = write_address_file(ray_dir, f"127.0.0.1:{closed_port}")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=service.log.name):
        assert service.ensure_ray(None, "ns") is True
        assert time.monotonic() - started < FAST_S
        init = calls[0]
        assert init["address"] == "local"  # never the stopped instance the file names
        assert init["resources"] == {service.DISK_RESOURCE: 1}
        assert service.ensure_ray(None, "ns") is True  # said once per process
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f":{closed_port}" in warning and path in warning and "does not answer" in warning
    assert calls[1]["address"] == "local"


def test_an_address_file_of_a_live_instance_is_joined(ray_tmp, open_port):
    ray_dir, calls = ray_tmp
    write_address_file(ray_dir, f"127.0.0.1:{open_port}")
    assert service.ensure_ray(None, "ns") is False
    [init] = calls
    assert init["address"].endswith(f":{open_port}") and "resources" not in init


def test_no_address_file_starts_a_new_local_instance(ray_tmp):
    _, calls = ray_tmp
    assert service.ensure_ray(None, "ns") is True
    assert calls[0]["address"] == "local"


def test_the_address_file_location_can_be_given(tmp_path, closed_port, open_port, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    stale, live = tmp_path / "stale", tmp_path / "live"
    for directory, port in ((stale, closed_port), (live, open_port)):
        directory.mkdir()
        write_address_file(directory, f"127.0.0.1:{port}")
    assert service._running_local_ray(str(stale)) is None
    assert service._running_local_ray(str(live)).endswith(f":{open_port}")
