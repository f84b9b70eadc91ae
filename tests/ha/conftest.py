"""Replicated Redis on loopback for the high-availability tests: a master, replicas and Sentinels,
all real server processes started here and stopped by their PIDs."""

from dataclasses import dataclass, field

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from queue_core import localserver
from tests.conftest import wait_for

SERVICE = "mymaster"


def start_master(data_dir) -> localserver.LocalServer:
    # Redis 7 waits 5 s by default before a diskless full sync, for more replicas to join it.
    return localserver.start(data_dir=data_dir, extra_args=["--repl-diskless-sync-delay", "0"])


@dataclass
class Replicated:
    master: localserver.LocalServer
    replicas: list = field(default_factory=list)
    sentinels: list = field(default_factory=list)
    tmp: object = None

    @property
    def sentinel_url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{SERVICE}/0"

    def master_port(self) -> int:
        """The master's port as the first Sentinel that answers sees it."""
        for s in self.sentinels:
            try:
                with s.client(retry=Retry(NoBackoff(), 0), socket_timeout=1) as c:
                    return int(c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1])
            except redis.RedisError:
                continue
        raise AssertionError("no Sentinel answered")

    def add_sentinels(self, count: int = 3) -> None:
        for i in range(count):
            self.sentinels.append(localserver.start_sentinel(self.master.port, data_dir=self.tmp / f"sentinel{i}",
                                                             service=SERVICE, quorum=2))

        def all_see_each_other() -> bool:
            for s in self.sentinels:
                with s.client(retry=Retry(NoBackoff(), 0)) as c:
                    if len(c.execute_command("SENTINEL", "SENTINELS", SERVICE)) < count - 1:
                        return False
                    if len(c.execute_command("SENTINEL", "REPLICAS", SERVICE)) < len(self.replicas):
                        return False
            return True
        wait_for(all_see_each_other, 30, "Sentinels that know each other and the replicas")

    def stop(self) -> None:
        for server in [*self.sentinels, *self.replicas, self.master]:
            server.stop()


@pytest.fixture
def replicated(tmp_path):
    """A master with one replica in sync (Sentinels on demand: ``add_sentinels()``)."""
    master = start_master(tmp_path / "master")
    setup = Replicated(master, tmp=tmp_path)
    try:
        setup.replicas.append(localserver.start_replica(master.port, data_dir=tmp_path / "replica0"))
        yield setup
    finally:
        setup.stop()

