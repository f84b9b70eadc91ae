"""One HTTP POST to an alert webhook that the rule's URL cannot turn against the site's own network.

A rule's URL is typed by an admin, but the call is made from the delivery worker's host: left to
urllib, ``http://169.254.169.254/`` or ``http://localhost:6379/`` would reach what only that host
may reach. So a delivery here:

- takes ``https://`` only (``http://`` too when DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP is on);
- resolves the host name once and refuses the call when ANY address it resolves to is loopback,
  link-local, private, shared (CGNAT), reserved or otherwise not public, unless it lies in one of
  DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS; multicast, broadcast and unspecified never. It then connects
  to that checked address itself, the name kept for the Host header and for TLS (SNI and the
  certificate check), so a second, different DNS answer is never used;
- follows no redirect (a 3xx is a failed delivery);
- ends at one deadline for the whole call, DNS to status line: a receiver answering a byte at a
  time is cut off there, however short each read is;
- reads nothing of the answer but its status code, and reports failures in its own words.
"""

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import urlsplit

from . import conf

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Not covered by ipaddress's is_private, and routed inside a provider's network.
_SHARED = ipaddress.ip_network("100.64.0.0/10")
# NAT64 turns 64:ff9b::a.b.c.d into a.b.c.d: judge the embedded IPv4 address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# No allow-list opens these: they are never one receiver.
_NEVER = ("multicast", "unspecified", "broadcast")


class Refused(Exception):
    """The URL or an address it resolves to is not allowed; no connection was made."""


class Failed(Exception):
    """The call was made and did not deliver; ``status`` is the receiver's HTTP status, if it sent one."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str        # ASCII (IDNA) host name or IP literal, as sent in Host and SNI
    port: int
    path: str


def parse(url: str) -> Target:
    """The URL's parts, or Refused saying what to change."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme == "http" and not conf.alert_webhook_allow_http():
        raise Refused("http:// webhooks are off: use an https:// URL (or set DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = True "
                      "for a receiver that has no TLS)")
    if scheme not in ("http", "https"):
        raise Refused(f"only https:// webhook URLs are called, not {scheme or 'a URL without scheme'}")
    if parts.username is not None or parts.password is not None:
        raise Refused("a webhook URL may not carry a user name or password: put a secret in the path or rely on "
                      "the X-Delayq-Signature header")
    try:
        port = parts.port
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        raise Refused("the webhook URL's host or port is not valid") from None
    if not host:
        raise Refused("the webhook URL has no host")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme, host, port or (443 if scheme == "https" else 80), path)


def _kind(address: IPAddress) -> str | None:
    """Why the address is not a public receiver's, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            return _kind(address.ipv4_mapped)
        if address in _NAT64:
            return _kind(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if address == ipaddress.IPv4Address("255.255.255.255"):
        return "broadcast"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address in _SHARED:
        return "shared (carrier-grade NAT)"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    return None if address.is_global else "not public"


def check_address(address: IPAddress | str, allowed: Iterable[IPNetwork] | None = None) -> None:
    """Refused unless a webhook may be called at ``address``. ``allowed``: networks opened on top
    of the public internet (DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS when None)."""
    address = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    kind = _kind(address)
    if kind is None:
        return
    if kind not in _NEVER:
        networks = conf.alert_webhook_allow_networks() if allowed is None else list(allowed)
        if any(address.version == n.version and address in n for n in networks):
            return
    hint = "" if kind in _NEVER else " (an in-house receiver: add its network to DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS)"
    raise Refused(f"{address} is a {kind} address: webhooks are not called there{hint}")


def literal_address(host: str) -> IPAddress | None:
    """The host as an IP address when the URL names one directly."""
    with suppress(ValueError):
        return ipaddress.ip_address(host.split("%", 1)[0])
    return None


def _resolve(target: Target, deadline: float) -> list[tuple]:
    """getaddrinfo bounded by the deadline (the resolver's own timeout can be far longer)."""
    found: dict = {}
    done = threading.Event()

    def run():
        try:
            found["infos"] = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM,
                                                proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            found["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="delayq-webhook-dns", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise Failed(f"{target.host} did not resolve within the delivery deadline")
    if "error" in found or not found.get("infos"):
        raise Failed(f"{target.host} does not resolve")
    return found["infos"]


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to one checked socket address; ``host`` stays the name for the Host header."""

    def __init__(self, target: Target, family: int, sockaddr: tuple, timeout: float):
        super().__init__(target.host, target.port, timeout=timeout)
        self.family, self.sockaddr = family, sockaddr

    def connect(self):
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.sockaddr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class _PinnedHTTPS(_PinnedHTTP):
    default_port = 443

    def connect(self):
        super().connect()
        # The handshake runs after self.sock is the TLS socket, so the deadline's cut reaches it too.
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.host,
                                                             do_handshake_on_connect=False)
        self.sock.do_handshake()


def _cut(connection: http.client.HTTPConnection) -> None:
    """At the deadline: end the connection under whatever read or write is waiting on it."""
    sock = connection.sock
    if sock is not None:
        with suppress(OSError):
            # socket.socket's own shutdown: an SSLSocket's would first drop its TLS state under
            # the thread still reading it.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def post(url: str, body: bytes, headers: dict[str, str], *, deadline_s: float | None = None,
         allowed: Iterable[IPNetwork] | None = None) -> int:
    """POST ``body``; the receiver's 2xx status, else Refused (nothing sent) or Failed.
    ``deadline_s``: the whole call (DELAYQ_ALERT_WEBHOOK_DEADLINE when None). ``allowed``: see
    check_address."""
    limit = conf.alert_webhook_deadline() if deadline_s is None else deadline_s
    deadline = time.monotonic() + limit
    target = parse(url)
    allowed = conf.alert_webhook_allow_networks() if allowed is None else list(allowed)
    infos = _resolve(target, deadline)
    for info in infos:      # every answer, not just the one used: a mixed answer is a rebinding attempt
        check_address(info[4][0], allowed)
    family, _, _, _, sockaddr = infos[0]
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise Failed(f"no answer within the {limit:g} s delivery deadline")
    kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    connection = kind(target, family, sockaddr, remaining)
    watchdog = threading.Timer(remaining, _cut, args=(connection,))
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        status = connection.getresponse().status     # the body is never read
        if time.monotonic() >= deadline:
            # The watchdog cut a receiver that sent its status line and then dripped headers: the
            # cut ends the headers, so http.client returns the status as if the answer were whole.
            raise TimeoutError
    except ssl.SSLCertVerificationError:
        raise Failed(f"the receiver's TLS certificate is not valid for {target.host}") from None
    except (OSError, http.client.HTTPException) as exc:
        if time.monotonic() >= deadline - 0.05 or isinstance(exc, TimeoutError):
            raise Failed(f"no answer within the {limit:g} s delivery deadline") from None
        raise Failed(_words(exc)) from None
    finally:
        watchdog.cancel()
        connection.close()
    if 300 <= status < 400:
        raise Failed(f"HTTP {status}: redirects are not followed, point the rule at the final URL", status)
    if not 200 <= status < 300:
        raise Failed(f"HTTP {status} from the receiver", status)
    return status


def _words(exc: BaseException) -> str:
    """A failure in delayq's words: an error's own text can carry what the receiver sent."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return "TLS handshake failed"
    if isinstance(exc, http.client.HTTPException | ConnectionResetError | BrokenPipeError):
        return "the receiver closed the connection without a valid HTTP answer"
    return f"network error ({type(exc).__name__})"
