"""Alert webhooks against loopback receivers started here: what the delivery refuses before any
connection (scheme, loopback, link-local, private, multicast, after DNS), that it connects to the
address it checked, follows no redirect, ends at one deadline however slowly a receiver answers,
that one slow receiver does not hold up another rule's, that what a receiver answers never reaches
a viewer's page beyond its status code, and that alert rules with a bad group or address are never
saved.

Loopback is refused by the policy itself, so tests that need a real receiver open 127.0.0.1 with
DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS (the same setting a site uses for an in-house receiver)."""

import ipaddress
import socket
import ssl
import subprocess
import threading
import time
from contextlib import suppress
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from dashboard import alerts, conf, webhooks
from dashboard.models import AlertEvent, AlertRule, ConsumerGroup, RetryPolicy, Topic

pytestmark = pytest.mark.django_db
LOOPBACK = [ipaddress.ip_network("127.0.0.1/32")]
HEADERS = {"Content-Type": "application/json"}


class Listener:
    """A bound, listening socket that is never accepted from: a connection made to it waits in
    its backlog, where ``connected()`` finds it."""

    def __init__(self, host="127.0.0.1", family=socket.AF_INET):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def connected(self) -> bool:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def close(self):
        self.sock.close()


class RawReceiver:
    """A TCP server on 127.0.0.1 whose ``answer(conn, request)`` writes whatever bytes a test needs."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None):
        self.answer, self.requests = answer, []
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        if tls:
            self.sock = tls.wrap_socket(self.sock, server_side=True)
            self.url = f"https://localhost:{self.port}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            self.requests.append(request)
            with suppress(OSError):       # the client cut the connection: what the deadline tests expect
                self.answer(self, conn, request)

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.fixture
def raw_receivers():
    started = []

    def start(answer, tls=None):
        started.append(RawReceiver(answer, tls))
        return started[-1]

    yield start
    for r in started:
        r.close()


@pytest.fixture
def http_allowed(settings):
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = True


@pytest.fixture
def no_connect(monkeypatch):
    """Every connection the delivery opens, recorded (there is exactly one place it connects)."""
    made = []
    real = webhooks._PinnedHTTP.connect

    def connect(self):
        made.append(self.sockaddr)
        return real(self)

    monkeypatch.setattr(webhooks._PinnedHTTP, "connect", connect)
    return made


@pytest.fixture
def orders(site_queue, settings):
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = True
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS = ["127.0.0.1/32"]
    site_queue.configure_topic("orders")
    return Topic.objects.create(name="orders", retry_policy=RetryPolicy.objects.create(name="p", jitter=0))


def test_finding_webhook_plain_http_refused_unless_allowed(receiver, settings, no_connect):
    with pytest.raises(webhooks.Refused, match=r"http:// webhooks are off: use an https:// URL"):
        webhooks.post(receiver.url, b"{}", HEADERS, allowed=LOOPBACK)
    for url in ("ftp://example.com/hook", "file:///etc/passwd", "gopher://example.com/"):
        with pytest.raises(webhooks.Refused, match="only https:// webhook URLs"):
            webhooks.post(url, b"{}", HEADERS)
    with pytest.raises(webhooks.Refused, match="user name or password"):
        webhooks.post("https://user:pw@example.com/hook", b"{}", HEADERS)
    assert no_connect == [] and receiver.calls == []
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = True
    assert webhooks.post(receiver.url, b"{}", HEADERS, allowed=LOOPBACK) == 200
    assert len(receiver.calls) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.1", "2130706433", "0x7f000001", "0.0.0.0",
                                  "[::ffff:127.0.0.1]"])
def test_finding_webhook_to_loopback_refused_without_connecting(host, http_allowed, no_connect):
    listener = Listener()
    try:
        with pytest.raises(webhooks.Refused, match=r"is a (loopback|unspecified) address"):
            webhooks.post(f"http://{host}:{listener.port}/hook", b"{}", HEADERS)
        assert no_connect == [] and not listener.connected()
    finally:
        listener.close()


def test_finding_webhook_to_ipv6_loopback_refused_without_connecting(http_allowed, no_connect):
    listener = Listener("::1", socket.AF_INET6)
    try:
        with pytest.raises(webhooks.Refused, match="::1 is a loopback address"):
            webhooks.post(f"http://[::1]:{listener.port}/hook", b"{}", HEADERS)
        assert no_connect == [] and not listener.connected()
    finally:
        listener.close()


@pytest.mark.parametrize(("host", "kind"), [
    ("169.254.169.254", "link-local"), ("[fe80::1]", "link-local"), ("10.0.0.1", "private"),
    ("172.16.5.4", "private"), ("192.168.1.1", "private"), ("[fc00::1]", "private"),
    ("100.64.0.1", r"shared \(carrier-grade NAT\)"), ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"), ("[ff02::1]", "multicast"), ("255.255.255.255", "broadcast"),
    ("[64:ff9b::a00:1]", "private"), ("240.0.0.1", "reserved"),
])
def test_finding_webhook_to_metadata_private_and_multicast_addresses_refused(host, kind, http_allowed, no_connect):
    for scheme in ("http", "https"):
        with pytest.raises(webhooks.Refused, match=f"is a {kind} address"):
            webhooks.post(f"{scheme}://{host}/hook", b"{}", HEADERS)
    assert no_connect == []


def test_finding_webhook_allow_list_never_opens_multicast_or_unspecified(http_allowed, no_connect):
    everything = [ipaddress.ip_network("0.0.0.0/0")]
    for host in ("224.0.0.1", "0.0.0.0", "255.255.255.255"):
        with pytest.raises(webhooks.Refused):
            webhooks.post(f"http://{host}/hook", b"{}", HEADERS, allowed=everything)
    assert no_connect == []


def test_finding_webhook_name_with_one_private_answer_among_public_ones_refused(http_allowed, no_connect,
                                                                                  monkeypatch):
    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port))]

    monkeypatch.setattr(webhooks.socket, "getaddrinfo", resolve)
    with pytest.raises(webhooks.Refused, match="10.1.2.3 is a private address"):
        webhooks.post("https://rebind.example/hook", b"{}", HEADERS)
    assert no_connect == []


def test_finding_webhook_connects_to_the_address_it_checked_not_a_second_dns_answer(receiver, http_allowed,
                                                                                   monkeypatch):
    """The first answer is the (allowed) receiver, every later one a private address: the call
    resolves once and connects there, the name kept in the Host header."""
    real, answers = socket.getaddrinfo, []

    def rebinding(host, port, *args, **kwargs):
        if host != "hooks.test":
            return real(host, port, *args, **kwargs)
        answers.append(host)
        address = "127.0.0.1" if len(answers) == 1 else "10.9.9.9"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(webhooks.socket, "getaddrinfo", rebinding)
    port = receiver.server.server_port
    assert webhooks.post(f"http://hooks.test:{port}/hook", b"{}", HEADERS, allowed=LOOPBACK) == 200
    assert answers == ["hooks.test"]
    assert receiver.calls[0][0]["Host"] == f"hooks.test:{port}"


def test_finding_webhook_redirect_not_followed(raw_receivers, http_allowed):
    target = raw_receivers(lambda r, conn, request: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    redirect = (f"HTTP/1.1 302 Found\r\nLocation: {target.url}\r\nContent-Length: 0\r\n\r\n").encode()
    redirecting = raw_receivers(lambda r, conn, request: conn.sendall(redirect))
    with pytest.raises(webhooks.Failed, match="HTTP 302: redirects are not followed") as failure:
        webhooks.post(redirecting.url, b"{}", HEADERS, allowed=LOOPBACK)
    assert failure.value.status == 302
    assert len(redirecting.requests) == 1 and target.requests == []


def trickle(receiver, conn, request):
    """The answer one byte every 0.5 s (about 20 s in all, unless the client goes first)."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
        if receiver.stop.wait(0.5):
            return
        conn.sendall(bytes([byte]))


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_finding_webhook_deadline_covers_the_whole_answer_not_each_read(scheme, raw_receivers, http_allowed,
                                                                        tls_files, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files / "ca.pem"))
    slow = raw_receivers(trickle, server_tls(tls_files) if scheme == "https" else None)
    started = time.monotonic()
    with pytest.raises(webhooks.Failed, match=r"no answer within the 2 s delivery deadline"):
        webhooks.post(slow.url, b"{}", HEADERS, deadline_s=2, allowed=LOOPBACK)
    took = time.monotonic() - started
    assert 1.9 < took < 3, took          # every read got a byte within 0.5 s: only a whole-call deadline ends it


def drip_headers(receiver, conn, request):
    """A whole status line at once, then a header byte every 0.5 s (the security review's receiver)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for byte in b"X-Slow: " + b"a" * 40:
        if receiver.stop.wait(0.5):
            return
        conn.sendall(bytes([byte]))


def test_finding_webhook_cut_after_its_status_line_counted_as_delivered(raw_receivers, http_allowed):
    """The deadline's cut ended the headers, so http.client returned the 200 it had read: a receiver
    that never finished answering counted as a delivery."""
    slow = raw_receivers(drip_headers)
    with pytest.raises(webhooks.Failed, match=r"no answer within the 2 s delivery deadline"):
        webhooks.post(slow.url, b"{}", HEADERS, deadline_s=2, allowed=LOOPBACK)


def test_finding_one_slow_webhook_does_not_stall_other_deliveries(orders, raw_receivers, receiver, settings):
    settings.DELAYQ_ALERT_WEBHOOK_DEADLINE = 3
    slow = raw_receivers(trickle)
    # The slow rule comes first in every order the deliverer could use (rule id, event time).
    slow_rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=0,
                                         webhook_url=slow.url)
    fast_rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.OLDEST_READY, threshold=1,
                                         webhook_url=receiver.url)
    for rule in (slow_rule, fast_rule):
        AlertEvent.objects.create(rule=rule, change=AlertEvent.Change.FIRING, summary=f"{rule.kind} fired",
                                  next_attempt=timezone.now())
    answered = []
    real_post = webhooks.post

    def timed_post(url, *args, **kwargs):
        status = real_post(url, *args, **kwargs)
        answered.append((url, time.monotonic() - started))
        return status

    started = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(webhooks, "post", timed_post)
        assert alerts.deliver() == (1, 1)
    assert time.monotonic() - started >= 2.9          # the slow one did run to its deadline ...
    assert answered[0][0] == receiver.url and answered[0][1] < 1.5, answered   # ... while the other went out
    assert AlertEvent.objects.get(rule=fast_rule).delivery_state == "delivered"
    assert "deadline" in AlertEvent.objects.get(rule=slow_rule).last_error


def test_finding_a_failed_event_holds_back_only_its_own_rules_later_events(orders, receiver):
    rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=0,
                                    webhook_url=receiver.url)
    first, second = (AlertEvent.objects.create(rule=rule, change=change, summary=change, next_attempt=timezone.now())
                     for change in (AlertEvent.Change.FIRING, AlertEvent.Change.RESOLVED))
    receiver.statuses.append(503)
    assert alerts.deliver() == (0, 1) and len(receiver.calls) == 1      # "resolved" was not sent before "firing"
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.attempts, second.attempts) == (1, 0) and second.next_attempt == first.next_attempt
    assert alerts.deliver(now=first.next_attempt) == (2, 0)
    assert [b["alert"] for b in receiver.bodies()[1:]] == ["firing", "resolved"]


def test_finding_receiver_answer_never_shown_to_viewers(orders, raw_receivers, viewer, admin_user, settings):
    leaky = raw_receivers(lambda r, conn, request: conn.sendall(
        b"HTTP/1.1 500 SECRET-REASON db=10.0.0.7\r\nX-Debug: SECRET-HEADER\r\nContent-Length: 20\r\n\r\n"
        b"SECRET-BODY password"))
    rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=0,
                                    webhook_url=leaky.url)
    AlertEvent.objects.create(rule=rule, change=AlertEvent.Change.FIRING, summary="dead letters fired",
                              next_attempt=timezone.now())
    assert alerts.deliver() == (0, 1)
    event = AlertEvent.objects.get()
    assert event.last_error == "HTTP 500 from the receiver" and event.receiver_status == 500
    overview = viewer.get(reverse("delayq:overview")).content.decode()
    assert "pending: the receiver answered HTTP 500" in overview and "SECRET" not in overview
    events_admin = admin_user.get(reverse("admin:delayq_alertevent_changelist")).content.decode()
    assert "HTTP 500 from the receiver" in events_admin and "SECRET" not in events_admin
    # A failure without a status: the viewer learns that it failed, not where it was sent.
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS = []
    assert alerts.deliver(now=timezone.now() + timedelta(minutes=5)) == (0, 1)
    event.refresh_from_db()
    assert event.last_error.startswith("refused: 127.0.0.1 is a loopback address")
    overview = viewer.get(reverse("delayq:overview")).content.decode()
    assert "the last attempt failed (the admin&#x27;s Alert events say why)" in overview
    assert "127.0.0.1" not in overview and "loopback" not in overview


@pytest.fixture
def tls_files(tmp_path):
    """A CA, and a certificate it signed for localhost (as a public receiver's would be)."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)

    # The key usages: Python's default context verifies strictly (VERIFY_X509_STRICT).
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=delayq test CA", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "host.key", "-out", "host.csr", "-subj", "/CN=localhost")
    (tmp_path / "ext.cnf").write_text("subjectAltName=DNS:localhost\nkeyUsage=critical,digitalSignature,"
                                      "keyEncipherment\nextendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "host.pem", "-days", "1", "-extfile", "ext.cnf")
    return tmp_path


def server_tls(tls_files) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls_files / "host.pem", tls_files / "host.key")
    return context


def test_finding_webhook_tls_checks_the_name_while_connecting_to_the_checked_address(receiver, tls_files,
                                                                                      monkeypatch):
    receiver.server.socket = server_tls(tls_files).wrap_socket(receiver.server.socket, server_side=True)
    port = receiver.server.server_port
    with pytest.raises(webhooks.Failed, match="TLS certificate is not valid for localhost"):
        webhooks.post(f"https://localhost:{port}/hook", b"{}", HEADERS, allowed=LOOPBACK)   # CA not trusted yet
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files / "ca.pem"))
    assert webhooks.post(f"https://localhost:{port}/hook", b"{}", HEADERS, allowed=LOOPBACK) == 200
    assert receiver.calls[-1][0]["Host"] == f"localhost:{port}"
    with pytest.raises(webhooks.Failed, match="TLS certificate is not valid for 127.0.0.1"):
        webhooks.post(f"https://127.0.0.1:{port}/hook", b"{}", HEADERS, allowed=LOOPBACK)   # not its name


def test_finding_alert_rule_group_validated(orders, site_queue):
    def rule(group, kind=AlertRule.Kind.DEAD_PER_HOUR):
        return AlertRule(topic=orders, group=group, kind=kind, threshold=1, email_to="ops@example.com")

    with pytest.raises(ValidationError) as bad_name:
        rule("no spaces here").full_clean()
    assert "Group names are" in bad_name.value.message_dict["group"][0]
    with pytest.raises(ValidationError) as unknown:
        rule("billing").full_clean()
    assert unknown.value.message_dict["group"] == [
        "Topic orders has no consumer group 'billing' (it has: default): add the group under Consumer groups "
        "first, or pick one of those."]
    with pytest.raises(ValidationError):
        rule("billing").save()                       # not only the admin's form: no save reaches the database
    assert not AlertRule.objects.exists()
    ConsumerGroup.objects.create(topic=orders, name="billing", retry_policy=orders.retry_policy)
    site_queue.configure_group("orders", "fromcode")          # a group added from Python, not in the dashboard
    rule("billing").save()
    rule("fromcode", kind=AlertRule.Kind.NO_WORKERS).save()
    assert sorted(AlertRule.objects.values_list("group", flat=True)) == ["billing", "fromcode"]


def test_finding_alert_rule_email_to_validated(orders):
    rule = AlertRule(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=1,
                     email_to="ops@example.com, not-an-address, <x>@y")
    with pytest.raises(ValidationError) as bad:
        rule.full_clean()
    assert bad.value.message_dict["email_to"] == [
        "Not an e-mail address: 'not-an-address', '<x>@y'. Give addresses like ops@example.com, separated by commas."]
    with pytest.raises(ValidationError):
        rule.save()
    assert not AlertRule.objects.exists()


def test_finding_alert_rule_webhook_checked_when_saved(orders, settings):
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = False
    for url, says in (("http://hooks.example.com/x", "This URL would not be called: http:// webhooks are off: use "
                                                     "an https:// URL"),
                      ("https://169.254.169.254/latest", "169.254.169.254 is a link-local address"),
                      ("https://[::1]/x", "::1 is a loopback address")):
        with pytest.raises(ValidationError) as bad:
            AlertRule(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=1, webhook_url=url).save()
        assert says in bad.value.message_dict["webhook_url"][0]
    AlertRule(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=1,
              webhook_url="https://hooks.example.com/x").save()      # a name: checked at every call instead
    assert AlertRule.objects.count() == 1


def test_finding_alert_rule_admin_shows_the_validation_errors(admin_user, orders):
    response = admin_user.post(reverse("admin:delayq_alertrule_add"), {
        "topic": orders.pk, "group": "billing", "kind": "dead_per_hour", "threshold": "1", "window_minutes": "5",
        "webhook_url": "", "email_to": "ops@example.com, nope", "enabled": "on"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "has no consumer group &#x27;billing&#x27;" in page and "Not an e-mail address: &#x27;nope&#x27;" in page
    assert not AlertRule.objects.exists()


def test_finding_webhook_settings_checked(settings):
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS = "10.0.0.0/8"
    settings.DELAYQ_ALERT_WEBHOOK_DEADLINE = 0
    found = dict(conf.problems())
    assert "must be a list of networks" in found["DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS"]
    assert "(0, 300]" in found["DELAYQ_ALERT_WEBHOOK_DEADLINE"]
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS = ["10.0.0.0/8", "not a network"]
    assert "DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS" in dict(conf.problems())
