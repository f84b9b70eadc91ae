"""Every DELAYQ_* setting, its default and its rule, read in one place.

A host project sets only what differs from these defaults. ``checks.py`` turns a bad value into a
system-check error that names the setting, so ``manage.py check`` fails before the first page does.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from .redaction import DEFAULT_KEY_FRAGMENTS


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    doc: str


def _base_dir() -> Path | None:
    base = getattr(settings, "BASE_DIR", None)
    return Path(base) if base else None


SETTINGS = {s.name: s for s in (
    Setting("DELAYQ_REDIS_URL", "redis://127.0.0.1:6379/0",
            "the engine's Redis: redis://, rediss://, unix://, redis+cluster:// or "
            "redis+sentinel://host:port[,host:port]/service[/db]"),
    Setting("DELAYQ_REDIS_WAIT_REPLICAS", 0,
            "publishes, replays and restores return only once this many replicas acknowledged them (Redis WAIT)"),
    Setting("DELAYQ_REDIS_WAIT_TIMEOUT", 2.0, "seconds to wait for those replicas before reporting the failure"),
    Setting("DELAYQ_REDIS_TLS_CA_FILE", "", "CA certificate file that verifies a rediss:// server"),
    Setting("DELAYQ_REDIS_TLS_CERT_FILE", "", "client certificate file, for servers that require one"),
    Setting("DELAYQ_REDIS_TLS_KEY_FILE", "", "the client certificate's private key file"),
    Setting("DELAYQ_REDIS_TLS_INSECURE", False,
            "skip verifying the server's certificate (test set-ups only: anyone in between can read the queue)"),
    Setting("DELAYQ_PREFIX", "dq", "the first part of every Redis key delayq writes"),
    Setting("DELAYQ_ARCHIVE_DIR", "<BASE_DIR>/var/delayq/archive",
            "absolute folder of the event archive (Parquet files written by the archive task)"),
    Setting("DELAYQ_ARCHIVE_MAX_WAIT", 300.0, "seconds a quiet topic's events wait for a fuller archive file"),
    Setting("DELAYQ_ANALYTICS_DIR", "<BASE_DIR>/var/delayq/analytics", "absolute folder of the analytics job's output"),
    Setting("DELAYQ_ANALYTICS_DAYS", 30, "days of analytics loaded into the dashboard"),
    Setting("DELAYQ_UNDO_HOURS", 24.0,
            "hours a purge or kill operation keeps what it removed in Redis, so that it can be undone"),
    Setting("DELAYQ_LOGIN_URL", "delayq:login",
            "where anonymous users are sent: delayq's own login page unless you name your project's"),
    Setting("DELAYQ_REDACT_KEY_FRAGMENTS", DEFAULT_KEY_FRAGMENTS,
            "key fragments masked in every topic's payloads and headers, case-insensitively, at any depth"),
    Setting("DELAYQ_METRICS", False, "serve Prometheus metrics at the app's metrics/ address (off by default)"),
    Setting("DELAYQ_METRICS_TOKEN", "",
            "a bearer token that may read metrics/ without a login (from the environment; empty: logged-in "
            "users with view_queue only)"),
    Setting("DELAYQ_METRICS_REFRESH", 0.0,
            "seconds between renders of metrics/ by the delayq.refresh_metrics beat task, which scrapes then "
            "serve while younger than twice that; 0: every scrape reads Redis itself"),
    Setting("DELAYQ_ALERT_WEBHOOK_SECRET", "",
            "the shared secret alert webhooks are signed with (X-Delayq-Signature; from the environment)"),
    Setting("DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP", False,
            "also call http:// webhook URLs (off: https:// only, so nobody on the way can read or change an alert)"),
    Setting("DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS", [],
            "networks (CIDR strings) alert webhooks may reach although they are not public, e.g. an in-house "
            "receiver's 10.20.0.0/24; loopback, link-local, private and shared addresses are refused otherwise, "
            "multicast and unspecified always"),
    Setting("DELAYQ_ALERT_WEBHOOK_DEADLINE", 10.0,
            "seconds one webhook call may take in all, DNS to the receiver's status line"),
    Setting("DELAYQ_API_MAX_BODY_BYTES", 4 * 2**20,
            "largest request body the JSON API's publish and replay endpoints read (larger ones are refused unread: 413)"),
    Setting("DELAYQ_ROLE_NAMES", {"viewer": "delayq viewer", "operator": "delayq operator", "admin": "delayq admin"},
            "names of the auth groups delayq creates for its three roles"),
)}


def get(name: str) -> Any:
    """The setting's value: the project's if it sets one, else the documented default."""
    if hasattr(settings, name):
        return getattr(settings, name)
    default = SETTINGS[name].default
    if isinstance(default, str) and default.startswith("<BASE_DIR>/"):
        base = _base_dir()
        return str(base / default.removeprefix("<BASE_DIR>/")) if base else None
    return default


def redis_url() -> str:
    return get("DELAYQ_REDIS_URL")


def redis_tls() -> dict:
    """redis-py TLS options from the DELAYQ_REDIS_TLS_* settings (the URL's own options win)."""
    # Imported here: the services package reads this module (a top-level import would be a cycle).
    from .services.contracts import tls_options

    return tls_options(ca_file=get("DELAYQ_REDIS_TLS_CA_FILE") or "",
                               cert_file=get("DELAYQ_REDIS_TLS_CERT_FILE") or "",
                               key_file=get("DELAYQ_REDIS_TLS_KEY_FILE") or "",
                               insecure=bool(get("DELAYQ_REDIS_TLS_INSECURE")))


def redis_wait() -> tuple[int | None, float | None]:
    """(replicas, timeout) for replica-acknowledged writes; None where the URL's options apply."""
    replicas = get("DELAYQ_REDIS_WAIT_REPLICAS") if hasattr(settings, "DELAYQ_REDIS_WAIT_REPLICAS") else None
    timeout = get("DELAYQ_REDIS_WAIT_TIMEOUT") if hasattr(settings, "DELAYQ_REDIS_WAIT_TIMEOUT") else None
    return replicas, timeout


def prefix() -> str:
    return get("DELAYQ_PREFIX")


def archive_dir() -> str:
    return _folder("DELAYQ_ARCHIVE_DIR")


def analytics_dir() -> str:
    return _folder("DELAYQ_ANALYTICS_DIR")


def archive_max_wait() -> float:
    return float(get("DELAYQ_ARCHIVE_MAX_WAIT"))


def analytics_days() -> int:
    return int(get("DELAYQ_ANALYTICS_DAYS"))


def undo_hours() -> float:
    return float(get("DELAYQ_UNDO_HOURS"))


def login_url() -> str:
    return get("DELAYQ_LOGIN_URL")


def metrics_enabled() -> bool:
    return bool(get("DELAYQ_METRICS"))


def metrics_token() -> str:
    return get("DELAYQ_METRICS_TOKEN") or ""


def metrics_refresh() -> float:
    return float(get("DELAYQ_METRICS_REFRESH") or 0)


def alert_webhook_secret() -> str:
    return get("DELAYQ_ALERT_WEBHOOK_SECRET") or ""


def alert_webhook_allow_http() -> bool:
    return bool(get("DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP"))


def alert_webhook_allow_networks() -> list:
    import ipaddress

    return [ipaddress.ip_network(n, strict=False) for n in get("DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS") or ()]


def alert_webhook_deadline() -> float:
    return float(get("DELAYQ_ALERT_WEBHOOK_DEADLINE"))


def api_max_body_bytes() -> int:
    return int(get("DELAYQ_API_MAX_BODY_BYTES"))


def role_names() -> dict[str, str]:
    names = dict(SETTINGS["DELAYQ_ROLE_NAMES"].default)
    names.update(get("DELAYQ_ROLE_NAMES") or {})
    return names


def _folder(name: str) -> str:
    value = get(name)
    if not value:
        raise RuntimeError(f"{name} is not set and the project has no BASE_DIR to put it under: set {name} "
                           "to an absolute folder.")
    return str(value)


def _redis_problems() -> list[tuple[str, str]]:
    from .services.contracts import InvalidArgument, parse_redis_url

    found = []
    url = get("DELAYQ_REDIS_URL")
    try:
        target = parse_redis_url(url)
    except InvalidArgument as exc:
        return [("DELAYQ_REDIS_URL", str(exc))]
    replicas, timeout = get("DELAYQ_REDIS_WAIT_REPLICAS"), get("DELAYQ_REDIS_WAIT_TIMEOUT")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        found.append(("DELAYQ_REDIS_WAIT_REPLICAS", f"must be a whole number >= 0, not {replicas!r}"))
    elif replicas and target.scheme == "redis+cluster":
        found.append(("DELAYQ_REDIS_WAIT_REPLICAS", "is not supported with a redis+cluster:// URL (set it to 0)"))
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        found.append(("DELAYQ_REDIS_WAIT_TIMEOUT", f"must be a number of seconds in (0, 3600], not {timeout!r}"))
    tls = redis_tls()
    if tls and not target.tls:
        found.append(("DELAYQ_REDIS_URL", f"is a {target.scheme}:// URL but DELAYQ_REDIS_TLS_* settings are set; "
                                          "use rediss:// (or rediss+sentinel://) or remove them"))
    for name in ("DELAYQ_REDIS_TLS_CA_FILE", "DELAYQ_REDIS_TLS_CERT_FILE", "DELAYQ_REDIS_TLS_KEY_FILE"):
        path = get(name)
        if path and not Path(path).is_file():
            found.append((name, f"{path!r} does not exist or is not a file"))
    return found


def _webhook_problems() -> list[tuple[str, str]]:
    found = []
    deadline = get("DELAYQ_ALERT_WEBHOOK_DEADLINE")
    if isinstance(deadline, bool) or not isinstance(deadline, int | float) or not 0 < deadline <= 300:
        found.append(("DELAYQ_ALERT_WEBHOOK_DEADLINE", f"must be a number of seconds in (0, 300], not {deadline!r}"))
    networks = get("DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS")
    try:
        if isinstance(networks, str):
            raise TypeError
        alert_webhook_allow_networks()
    except (TypeError, ValueError):
        found.append(("DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS", "must be a list of networks like \"10.20.0.0/24\" "
                                                             f"or \"fd00::/64\", not {networks!r}"))
    return found


def problems() -> list[tuple[str, str]]:
    """(setting, what is wrong) for every invalid value; empty when all are fine."""
    found = []
    found += _redis_problems()
    pfx = get("DELAYQ_PREFIX")
    if not isinstance(pfx, str) or not pfx or any(c in pfx for c in "{}: \t\n"):
        found.append(("DELAYQ_PREFIX", f"must be a non-empty string without braces, colons or spaces, not {pfx!r}"))
    for name in ("DELAYQ_ARCHIVE_DIR", "DELAYQ_ANALYTICS_DIR"):
        value = get(name)
        if value is None:
            found.append((name, "is not set and the project has no BASE_DIR: set it to an absolute folder"))
        elif not isinstance(value, str | Path) or not Path(value).is_absolute():
            # A relative folder would depend on where each worker happens to be started.
            found.append((name, f"must be an absolute path, not {str(value)!r}"))
    for name, kind, low in (("DELAYQ_ARCHIVE_MAX_WAIT", (int, float), 0), ("DELAYQ_ANALYTICS_DAYS", (int,), 1),
                            ("DELAYQ_API_MAX_BODY_BYTES", (int,), 1), ("DELAYQ_METRICS_REFRESH", (int, float), 0)):
        value = get(name)
        if isinstance(value, bool) or not isinstance(value, kind) or value < low:
            found.append((name, f"must be a number >= {low}, not {value!r}"))
    login = get("DELAYQ_LOGIN_URL")
    if not isinstance(login, str) or not login:
        found.append(("DELAYQ_LOGIN_URL", f"must be a URL or a URL name, not {login!r}"))
    fragments = get("DELAYQ_REDACT_KEY_FRAGMENTS")
    if not isinstance(fragments, list | tuple) or not all(isinstance(f, str) and f.strip() for f in fragments):
        found.append(("DELAYQ_REDACT_KEY_FRAGMENTS", f"must be a list of non-empty strings, not {fragments!r}"))
    token = get("DELAYQ_METRICS_TOKEN")
    if not isinstance(token, str) or (token and len(token) < 16):
        found.append(("DELAYQ_METRICS_TOKEN", "must be empty or a secret of at least 16 characters"))
    secret = get("DELAYQ_ALERT_WEBHOOK_SECRET")
    if not isinstance(secret, str) or (secret and len(secret) < 16):
        found.append(("DELAYQ_ALERT_WEBHOOK_SECRET", "must be empty or a secret of at least 16 characters"))
    found += _webhook_problems()
    roles = get("DELAYQ_ROLE_NAMES")
    if not isinstance(roles, dict) or set(roles) - {"viewer", "operator", "admin"} or not all(
            isinstance(v, str) and v.strip() for v in roles.values()):
        found.append(("DELAYQ_ROLE_NAMES", "must map some of 'viewer', 'operator', 'admin' to non-empty group "
                                           f"names, not {roles!r}"))
    elif len(set(role_names().values())) < 3:
        found.append(("DELAYQ_ROLE_NAMES", "gives two roles the same group name"))
    return found
