"""The servers delayq starts itself (tests, benchmarks, ./scripts/run) are never another program's."""

import socket

import pytest
import redis

from config import devrun
from queue_core import localserver


@pytest.fixture
def squatter(redis_server):
    """Another Redis already listening on a port (the session's test server)."""
    return redis_server


def test_start_refuses_a_port_another_server_answers_on(squatter, tmp_path):
    with pytest.raises(localserver.PortInUse, match=f"port {squatter.port} .* already in use"):
        localserver.start(port=squatter.port, data_dir=tmp_path)


def test_a_server_answering_with_another_process_id_is_not_adopted(redis_server, tmp_path, monkeypatch):
    """The race the port check cannot close: the port is free when checked, then another server
    answers the readiness probe. The process id it reports gives it away."""
    monkeypatch.setattr(localserver, "port_is_free", lambda port: True)
    taken = int(redis_server.url.split(":")[2].split("/")[0])
    # Our server really listens elsewhere (a later --port wins), so the only PONG on the port
    # checked is the other server's, every time (no race with our server failing to bind).
    with pytest.raises(localserver.PortInUse, match="process id"):
        localserver.start(port=taken, data_dir=tmp_path, extra_args=["--port", str(localserver.free_port())])


def test_the_run_command_moves_off_a_taken_default_port_and_says_so(tmp_path, monkeypatch, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(devrun, "DEFAULT_DEV_REDIS_PORT", taken.getsockname()[1])
        monkeypatch.setattr(devrun, "VAR", tmp_path)
        server = devrun.start_dev_redis(None)
        try:
            assert server.port != taken.getsockname()[1]
            assert f"port {taken.getsockname()[1]} is in use by another program; using port {server.port}" \
                in capsys.readouterr().out
            assert redis.Redis(port=server.port).info("server")["process_id"] == server.process.pid
        finally:
            server.stop()


def test_the_run_command_stops_when_the_port_it_was_told_to_use_is_taken(tmp_path, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(devrun, "VAR", tmp_path)
        port = taken.getsockname()[1]
        with pytest.raises(devrun.DevRunError, match=f"port {port} is in use .* set DELAYQ_DEV_REDIS_PORT"):
            devrun.start_dev_redis(str(port))
    with pytest.raises(devrun.DevRunError, match="must be a port number"):
        devrun.start_dev_redis("six")
