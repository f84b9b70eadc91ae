"""TLS to Redis: a real server with a TLS port, certificates made by openssl for this test run."""

import shutil
import subprocess

import pytest
import redis

from queue_core import DelayQueue, InvalidArgument, localserver
from queue_core.cli import main as cli_main


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    assert shutil.which("openssl"), "openssl is needed to make test certificates (apt-get install openssl)"
    d = tmp_path_factory.mktemp("certs")
    # Python 3.13 verifies strictly (X509_STRICT): the CA needs key usage, the leaves a key id.
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=delayq test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                               "keyUsage=critical,digitalSignature,keyEncipherment\n"
                               "extendedKeyUsage=serverAuth,clientAuth\nauthorityKeyIdentifier=keyid,issuer\n"
                               "subjectKeyIdentifier=hash\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "san.ext", "-out", f"{name}.crt", cwd=d)
    return d


@pytest.fixture(scope="module")
def tls_server(certs, tmp_path_factory):
    """Plain port for the readiness probe, TLS port for the tests; client certificates required."""
    tls_port = localserver.free_port()
    server = localserver.start(data_dir=tmp_path_factory.mktemp("tls"), extra_args=[
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs / "server.crt"),
        "--tls-key-file", str(certs / "server.key"), "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", "yes"])
    server.extra["tls_port"] = tls_port
    yield server
    server.stop()


def tls_url(server, **query) -> str:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return f"rediss://127.0.0.1:{server.extra['tls_port']}/0" + (f"?{q}" if q else "")


def test_url_options_verify_the_server_and_present_a_client_certificate(tls_server, certs):
    q = DelayQueue.from_url(tls_url(tls_server, ssl_ca_certs=certs / "ca.crt", ssl_certfile=certs / "client.crt",
                                    ssl_keyfile=certs / "client.key"))
    msg_id = q.publish("t", b"over tls")
    assert q.get("t", msg_id).payload == b"over tls"


def test_settings_style_options_do_the_same(tls_server, certs):
    from queue_core.connect import tls_options
    tls = tls_options(ca_file=str(certs / "ca.crt"), cert_file=str(certs / "client.crt"),
                      key_file=str(certs / "client.key"))
    assert DelayQueue.from_url(tls_url(tls_server), tls=tls).redis.ping()


def test_an_unknown_server_certificate_is_refused_unless_verification_is_skipped_by_name(tls_server, certs):
    client_cert = dict(ssl_certfile=certs / "client.crt", ssl_keyfile=certs / "client.key")
    unverified = DelayQueue.from_url(tls_url(tls_server, **client_cert), socket_connect_timeout=2)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        unverified.redis.ping()
    insecure = DelayQueue.from_url(tls_url(tls_server, ssl_cert_reqs="none", **client_cert))
    assert insecure.redis.ping()


def test_a_server_that_requires_client_certificates_refuses_a_client_without_one(tls_server, certs):
    q = DelayQueue.from_url(tls_url(tls_server, ssl_ca_certs=certs / "ca.crt"), socket_connect_timeout=2)
    with pytest.raises(redis.ConnectionError):
        q.redis.ping()


def test_tls_options_on_a_plain_url_or_missing_files_are_clear_errors(tls_server, certs, tmp_path):
    with pytest.raises(InvalidArgument, match="need a rediss://"):
        DelayQueue.from_url(f"redis://127.0.0.1:{tls_server.port}/0?ssl_ca_certs={certs / 'ca.crt'}")
    with pytest.raises(InvalidArgument, match="TLS settings .* are set but the Redis URL is redis://"):
        DelayQueue.from_url(tls_server.url, tls={"ssl_ca_certs": str(certs / "ca.crt")})
    with pytest.raises(InvalidArgument, match="does not exist"):
        DelayQueue.from_url(tls_url(tls_server, ssl_ca_certs=tmp_path / "nope.crt"))


def test_the_cli_reads_tls_files_from_the_environment(tls_server, certs, monkeypatch, capsys):
    monkeypatch.setenv("DELAYQ_REDIS_TLS_CA_FILE", str(certs / "ca.crt"))
    monkeypatch.setenv("DELAYQ_REDIS_TLS_CERT_FILE", str(certs / "client.crt"))
    monkeypatch.setenv("DELAYQ_REDIS_TLS_KEY_FILE", str(certs / "client.key"))
    assert cli_main(["--url", tls_url(tls_server), "publish", "--topic", "cli", "hello"]) == 0
    assert cli_main(["--url", tls_url(tls_server), "stats", "--topic", "cli"]) == 0
    assert "cli" in capsys.readouterr().out
    monkeypatch.setenv("DELAYQ_REDIS_TLS_CA_FILE", str(certs / "missing.crt"))
    assert cli_main(["--url", tls_url(tls_server), "stats"]) == 2
    assert "missing.crt" in capsys.readouterr().err


def test_rediss_sentinel_speaks_tls_to_the_sentinel_and_to_the_master(tls_server, certs, tmp_path):
    """A Sentinel that takes TLS clients and watches the master over TLS; rediss+sentinel://
    verifies both with the CA and presents the client certificate the master requires."""
    sentinel_tls_port = localserver.free_port()
    tls = (f"tls-port {sentinel_tls_port}\ntls-cert-file {certs / 'server.crt'}\ntls-key-file {certs / 'server.key'}\n"
           f"tls-ca-cert-file {certs / 'ca.crt'}\ntls-auth-clients no\ntls-replication yes\n")
    sentinel = localserver.start_sentinel(tls_server.extra["tls_port"], data_dir=tmp_path / "sentinel", quorum=1,
                                          extra_conf=tls)
    try:
        url = (f"rediss+sentinel://127.0.0.1:{sentinel_tls_port}/mymaster/0?ssl_ca_certs={certs / 'ca.crt'}"
               f"&ssl_certfile={certs / 'client.crt'}&ssl_keyfile={certs / 'client.key'}")
        q = DelayQueue.from_url(url, socket_connect_timeout=2)
        msg_id = q.publish("via-sentinel", b"tls all the way")
        # It landed on the master the Sentinel names (read back over the master's plain port).
        assert DelayQueue(tls_server.client()).get("via-sentinel", msg_id).payload == b"tls all the way"
        unverified = DelayQueue.from_url(url.replace(f"ssl_ca_certs={certs / 'ca.crt'}&", ""),
                                         socket_connect_timeout=2)
        # redis-py's Sentinel client reports a Sentinel it could not verify as no master found.
        with pytest.raises(redis.ConnectionError, match="No master found for 'mymaster'"):
            unverified.publish("via-sentinel", b"x")
    finally:
        sentinel.stop()


def test_finding_tls_host_name_not_verified(certs, tmp_path):
    """A server whose certificate (signed by the trusted CA) names another host is refused: delayq asks
    redis-py to check host names whatever redis-py's default; only an explicit opt-out connects."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=elsewhere", "-keyout", "other.key",
             "-out", "other.csr", cwd=certs)
    (certs / "other.ext").write_text((certs / "san.ext").read_text().replace(
        "subjectAltName=IP:127.0.0.1,DNS:localhost", "subjectAltName=DNS:elsewhere.test"))
    _openssl("x509", "-req", "-in", "other.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "other.ext", "-out", "other.crt", cwd=certs)
    tls_port = localserver.free_port()
    server = localserver.start(data_dir=tmp_path, extra_args=[
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs / "other.crt"),
        "--tls-key-file", str(certs / "other.key"), "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", "no"])
    try:
        url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={certs / 'ca.crt'}"
        with pytest.raises(redis.ConnectionError, match="(?i)hostname|match"):
            DelayQueue.from_url(url).publish("t", b"x")
        q = DelayQueue.from_url(url + "&ssl_check_hostname=false")    # stated by name: connects
        assert q.get("t", q.publish("t", b"x")).payload == b"x"
    finally:
        server.stop()


def test_finding_tls_verification_off_by_enum_forced_a_host_name_check():
    """ssl_cert_reqs given as ssl.CERT_NONE (the enum, not the string) read as "verifymode.cert_none",
    so delayq added a host name check to a connection whose verification was turned off."""
    import ssl

    from queue_core import connect

    client = connect.connect(connect.parse("rediss://127.0.0.1:1/0"), tls={"ssl_cert_reqs": ssl.CERT_NONE})
    assert client.connection_pool.connection_kwargs.get("ssl_check_hostname") is not True
    client = connect.connect(connect.parse("rediss://127.0.0.1:1/0"), tls={})
    assert client.connection_pool.connection_kwargs.get("ssl_check_hostname") is True

