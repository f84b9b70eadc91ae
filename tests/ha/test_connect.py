"""Redis URLs: parsing, the errors a bad one gets, and passwords kept out of messages."""

import pytest

from queue_core import DelayQueue, InvalidArgument
from queue_core.connect import parse, redacted


def test_sentinel_urls_name_the_sentinels_the_service_and_the_database():
    t = parse("redis+sentinel://app:s3cret@10.0.0.1:26379,10.0.0.2:26380/orders-master/3"
              "?sentinel_password=sp&socket_timeout=2&wait_replicas=1&wait_timeout=0.5")
    assert t.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (t.service, t.db, t.tls) == ("orders-master", 3, False)
    assert t.options == {"socket_timeout": "2", "username": "app", "password": "s3cret"}
    assert t.sentinel_auth == {"password": "sp"}
    assert (t.wait_replicas, t.wait_timeout) == (1, 0.5)
    assert parse("rediss+sentinel://h:1/m").tls and parse("rediss+sentinel://h:1/m").db == 0


def test_delayq_options_are_taken_out_of_a_plain_url():
    t = parse("redis://:pw@127.0.0.1:6379/2?wait_replicas=2&socket_timeout=3")
    assert t.wait_replicas == 2 and "wait_replicas" not in t.url and "socket_timeout=3" in t.url


@pytest.mark.parametrize("url, says", [
    ("http://h:1/0", "unknown Redis URL scheme"),
    ("localhost:6379", "is not a Redis URL"),
    ("redis+sentinel://h:26379", "SERVICE_NAME"),
    ("redis+sentinel://h:26379/m/0/extra", "SERVICE_NAME"),
    ("redis+sentinel://h/m", "must be HOST:PORT"),
    ("redis+sentinel://h:x/m", "Sentinel port must be a whole number"),
    ("redis+sentinel://h:1/m/db", "database number"),
    ("redis://h?wait_replicas=two", "wait_replicas must be a whole number"),
    ("redis://h?wait_timeout=soon", "wait_timeout must be a number"),
    ("redis://h?ssl_ca_certs=/ca.crt", "need a rediss://"),
    ("redis://h?sentinel_password=x", r"only apply to redis\+sentinel://"),
    ("redis://h?wait_replica=1", "unknown option.*wait_replica in"),
])
def test_bad_urls_say_what_is_wrong(url, says):
    with pytest.raises(InvalidArgument, match=says):
        DelayQueue.from_url(url)


def test_passwords_never_reach_error_messages():
    assert redacted("redis://user:hunter2@h:1/0") == "redis://user:***@h:1/0"
    assert "hunter2" not in redacted("redis+sentinel://:hunter2@a:1,b:2/m?sentinel_password=hunter2&db=1")
    assert redacted("redis://h:1/0") == "redis://h:1/0"
    with pytest.raises(InvalidArgument) as info:
        DelayQueue.from_url("redis+sentinel://:hunter2@a:1/m/x")
    assert "hunter2" not in str(info.value)


def test_wait_replicas_is_refused_on_a_cluster(tmp_path):
    from queue_core import localserver

    servers = localserver.start_cluster(tmp_path, masters=1)
    try:
        with pytest.raises(InvalidArgument, match="not supported on Redis Cluster"):
            DelayQueue.from_url(f"redis+cluster://127.0.0.1:{servers[0].port}?wait_replicas=1")
    finally:
        for s in servers:
            s.stop()


def test_sentinel_clients_carry_the_database_tls_and_passwords_where_they_belong():
    """What connect() builds, before any connection is made: the master's password and database go
    to the master's pool, the Sentinels get their own password only, TLS applies to both."""
    from queue_core.connect import connect

    client = connect("rediss+sentinel://:masterpw@127.0.0.1:1,127.0.0.1:2/m/3?sentinel_password=sentpw"
                     "&ssl_cert_reqs=none")
    pool = client.connection_pool
    assert pool.connection_kwargs["db"] == 3 and pool.connection_kwargs["password"] == "masterpw"
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
    sentinel = pool.proxy.sentinel_manager.sentinels[0].connection_pool
    assert sentinel.connection_class.__name__ == "SSLConnection"
    assert sentinel.connection_kwargs["password"] == "sentpw"
    assert connect("redis+sentinel://127.0.0.1:1/m?db=4").connection_pool.connection_kwargs["db"] == 4
    plain = connect("redis+sentinel://:pw@127.0.0.1:1/m").connection_pool.proxy.sentinel_manager.sentinels[0]
    assert plain.connection_pool.connection_kwargs.get("password") is None
