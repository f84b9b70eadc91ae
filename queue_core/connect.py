"""Redis clients from URLs. Every place delayq takes a Redis URL (DelayQueue.from_url, the CLI and
its worker, the dashboard, the archiver, the Celery bridge) goes through ``connect()``:

    redis://[[user]:password@]host[:port][/db]        one server; rediss:// for TLS
    unix://[[user]:password@]/path/to/socket[?db=N]   one server on a Unix socket
    redis+cluster://host:port                          Redis Cluster (any node as the seed)
    redis+sentinel://[[user]:password@]host:port[,host:port...]/SERVICE[/DB]
    rediss+sentinel://...                              Sentinel with TLS to the Sentinels and the master

Query options are redis-py's connection options (``?socket_timeout=5``); for TLS they are
``ssl_ca_certs`` (CA file), ``ssl_certfile``/``ssl_keyfile`` (client certificate) and
``ssl_cert_reqs=none`` (skip verification: only when asked for by name). delayq's own options:

    wait_replicas=N, wait_timeout=SECONDS   replica-acknowledged writes (see DelayQueue)
    sentinel_username=, sentinel_password=  when the Sentinels have their own ACL or password

The URL's user and password are the master's (Sentinels are asked without one unless
``sentinel_password`` says otherwise, as Sentinels usually have no password of their own).
"""

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode

import redis
import redis.asyncio

from .errors import InvalidArgument
from .own_connection import pack_scripts_with_hiredis

SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel", "rediss+sentinel")
DELAYQ_OPTIONS = ("wait_replicas", "wait_timeout", "sentinel_username", "sentinel_password")
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
# A replica that has just (re)connected, after a failover say, can take up to a second to acknowledge
# its first write (its ACK timer): a default of 1 s would refuse publishes spuriously right then.
DEFAULT_WAIT_TIMEOUT = 2.0
# The environment variables the CLI (and so every worker it starts) reads beside --url; the
# standalone site maps the same names to its settings.
TLS_ENV = {"DELAYQ_REDIS_TLS_CA_FILE": "ssl_ca_certs", "DELAYQ_REDIS_TLS_CERT_FILE": "ssl_certfile",
           "DELAYQ_REDIS_TLS_KEY_FILE": "ssl_keyfile"}


@dataclass(frozen=True)
class Target:
    """A parsed URL: what to connect to, and the options that are delayq's rather than redis-py's."""

    scheme: str
    url: str                                       # the URL redis-py gets (sentinel: unused)
    options: dict = field(default_factory=dict)    # redis-py connection options from the query
    wait_replicas: int = 0
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    sentinel_auth: dict = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.scheme.startswith("rediss")


@functools.cache
def _connection_options() -> frozenset[str]:
    """The option names redis-py's connections and pools take (what a URL's query may set)."""
    import inspect

    from redis import connection

    names = set(connection.URL_QUERY_ARGUMENT_PARSERS)
    for cls in (connection.SSLConnection, connection.UnixDomainSocketConnection, connection.ConnectionPool):
        for klass in cls.__mro__:
            if "__init__" in klass.__dict__:
                names |= set(inspect.signature(klass.__init__).parameters) - {"self", "args", "kwargs"}
    return frozenset(names)


def _int(value: str, what: str, url: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidArgument(f"{what} must be a whole number, not {value!r}, in {redacted(url)}") from None


def parse(url: str) -> Target:
    """Split a delayq Redis URL into its target and options, or say what is wrong with it."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument(f"{url!r} is not a Redis URL; expected one of "
                              + ", ".join(f"{s}://" for s in SCHEMES))
    scheme, rest = url.split("://", 1)
    if scheme not in SCHEMES:
        raise InvalidArgument(f"unknown Redis URL scheme {scheme + '://'!r} in {redacted(url)}; expected one of "
                              + ", ".join(f"{s}://" for s in SCHEMES))
    base, _, query = rest.partition("?")
    options, ours = {}, {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        (ours if name in DELAYQ_OPTIONS else options)[name] = value
    unknown = sorted(set(options) - _connection_options())
    if unknown:
        # redis-py would only fail at the first command, with a TypeError from deep inside.
        raise InvalidArgument(f"unknown option(s) {', '.join(unknown)} in {redacted(url)}; the query takes redis-py "
                              "connection options (socket_timeout, ssl_ca_certs, ...) and delayq's "
                              + ", ".join(DELAYQ_OPTIONS))
    tls_given = sorted(set(options) & set(TLS_OPTIONS))
    if tls_given and not scheme.startswith("rediss"):
        raise InvalidArgument(f"TLS options ({', '.join(tls_given)}) need a rediss:// or rediss+sentinel:// URL, "
                              f"not {scheme}://")
    wait_replicas = _int(ours.get("wait_replicas", "0"), "wait_replicas", url)
    try:
        wait_timeout = float(ours.get("wait_timeout", DEFAULT_WAIT_TIMEOUT))
    except ValueError:
        raise InvalidArgument(f"wait_timeout must be a number of seconds in {redacted(url)}") from None
    plain = f"{scheme}://{base}" + (f"?{urlencode(options)}" if options else "")
    common = dict(scheme=scheme, options=options, wait_replicas=wait_replicas, wait_timeout=wait_timeout)
    if not scheme.endswith("+sentinel"):
        if "sentinel_username" in ours or "sentinel_password" in ours:
            raise InvalidArgument("sentinel_username/sentinel_password only apply to redis+sentinel:// URLs")
        return Target(url=plain, **common)

    userinfo, _, hosts_part = base.rpartition("@")
    hosts, _, path = hosts_part.partition("/")
    sentinels = []
    for item in filter(None, hosts.split(",")):
        host, sep, port = item.rpartition(":")
        if not sep or not host:
            raise InvalidArgument(f"Sentinel address {item!r} must be HOST:PORT in {redacted(url)}")
        sentinels.append((host.strip("[]"), _int(port, "a Sentinel port", url)))
    parts = [unquote(p) for p in path.split("/") if p]
    if not sentinels or not parts or len(parts) > 2:
        raise InvalidArgument(f"{redacted(url)}: expected {scheme}://HOST:PORT[,HOST:PORT...]/SERVICE_NAME[/DB] "
                              "(SERVICE_NAME is the name the Sentinels monitor, e.g. mymaster)")
    if userinfo:
        user, _, password = userinfo.partition(":")
        if user:
            options["username"] = unquote(user)
        if password:
            options["password"] = unquote(password)
    sentinel_auth = {k.removeprefix("sentinel_"): ours[k] for k in ("sentinel_username", "sentinel_password")
                     if ours.get(k)}
    return Target(url=plain, sentinels=tuple(sentinels), service=parts[0],
                  db=_int(parts[1], "the database number", url) if len(parts) > 1 else 0,
                  sentinel_auth=sentinel_auth, **common)


def _check_files(options: dict) -> None:
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        path = options.get(name)
        if path and not Path(path).is_file():
            raise InvalidArgument(f"TLS file {path!r} ({name}) does not exist or is not a file")
    if options.get("ssl_keyfile") and not options.get("ssl_certfile"):
        raise InvalidArgument("a TLS client key (ssl_keyfile) needs its certificate (ssl_certfile) too")


def tls_options(*, ca_file: str = "", cert_file: str = "", key_file: str = "", insecure: bool = False) -> dict:
    """redis-py options for TLS settings given outside the URL (settings, environment)."""
    options = {name: value for name, value in (("ssl_ca_certs", ca_file), ("ssl_certfile", cert_file),
                                               ("ssl_keyfile", key_file)) if value}
    if insecure:
        options.update(ssl_cert_reqs="none", ssl_check_hostname=False)
    return options


def tls_options_from_env(environ=os.environ) -> dict:
    """TLS options from DELAYQ_REDIS_TLS_CA_FILE / _CERT_FILE / _KEY_FILE and
    DELAYQ_REDIS_TLS_INSECURE=1 (the CLI and its workers read these beside --url)."""
    return tls_options(ca_file=environ.get("DELAYQ_REDIS_TLS_CA_FILE", ""),
                       cert_file=environ.get("DELAYQ_REDIS_TLS_CERT_FILE", ""),
                       key_file=environ.get("DELAYQ_REDIS_TLS_KEY_FILE", ""),
                       insecure=environ.get("DELAYQ_REDIS_TLS_INSECURE", "").lower() in ("1", "true", "yes", "on"))


def connect(url: str | Target, *, tls: dict | None = None, asyncio: bool = False, **redis_kwargs):
    """A redis-py client for a delayq URL. ``tls``: options from settings (the URL's own win);
    they are ignored for a URL without TLS only when empty, else refused (they would be silently
    unused). ``asyncio``: a redis.asyncio client instead of a blocking one. ``redis_kwargs`` go
    to every connection (timeouts, retry)."""
    target = url if isinstance(url, Target) else parse(url)
    if tls and not target.tls:
        raise InvalidArgument(f"TLS settings ({', '.join(sorted(tls))}) are set but the Redis URL is "
                              f"{target.scheme}://; use rediss:// (or rediss+sentinel://) or remove them")
    options = {**(tls or {}), **target.options}
    _check_files(options)
    if target.tls and "ssl_check_hostname" not in options \
            and str(getattr(reqs := options.get("ssl_cert_reqs", "required"), "name", reqs)).lower() \
            not in ("none", "cert_none"):
        # Stated, not left to redis-py's default (False before 6.0): a certificate for another host
        # name must not be accepted just because a CA we trust signed it.
        tls = {**(tls or {}), "ssl_check_hostname": True}
        options["ssl_check_hostname"] = True
    if target.scheme == "redis+cluster":
        if asyncio:
            from redis.asyncio.cluster import RedisCluster
        else:
            from redis.cluster import RedisCluster
        return RedisCluster.from_url("redis://" + target.url.removeprefix("redis+cluster://"), **redis_kwargs)
    if not target.scheme.endswith("+sentinel"):
        # redis-py lets the URL's own options win over these keywords.
        client_class = redis.asyncio.Redis if asyncio else redis.Redis
        client = client_class.from_url(target.url, **{**(tls or {}), **redis_kwargs})
    else:
        client = _sentinel_client(target, options, redis_kwargs, asyncio)
    if asyncio:   # the engine's script calls packed by hiredis, as the blocking client packs them
        pack_scripts_with_hiredis(client)
    return client


def _sentinel_client(target: Target, options: dict, redis_kwargs: dict, asyncio: bool = False):
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS

    if asyncio:
        from redis.asyncio.sentinel import Sentinel
    else:
        from redis.sentinel import Sentinel

    conn = {}
    for name, value in options.items():
        parser = URL_QUERY_ARGUMENT_PARSERS.get(name)
        conn[name] = parser(value) if parser and isinstance(value, str) else value
    conn.update(redis_kwargs)
    db = conn.pop("db", target.db)          # ?db=N, like the other URL forms, else the path's /DB
    tls = {k: v for k, v in conn.items() if k.startswith("ssl_")}
    # The Sentinels share the master's socket and TLS options but not its password.
    sentinel_kwargs = {k: v for k, v in conn.items() if k.startswith("socket_") or k == "retry"}
    sentinel_kwargs.update(target.sentinel_auth)
    if target.tls:
        sentinel_kwargs.update(ssl=True, **tls)
        conn["ssl"] = True
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(target.service, db=db, **conn)


def redacted(url: str) -> str:
    """The URL with its passwords replaced by ***, for logs and error messages."""
    if not isinstance(url, str) or "://" not in url:
        return repr(url)
    scheme, rest = url.split("://", 1)
    base, sep, query = rest.partition("?")
    userinfo, at, hosts = base.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    if query:
        query = urlencode([(k, "***" if "password" in k else v) for k, v in parse_qsl(query, keep_blank_values=True)],
                          safe="/:,*", quote_via=quote)
    return f"{scheme}://{userinfo}{at}{hosts}{sep}{query}"

