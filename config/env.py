"""Strict readers for settings from the environment: a malformed value stops the site with a
message naming the variable, instead of silently becoming a default."""

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use one of 1/0, true/false, yes/no, on/off")


def _envnumber(name: str, default, kind, what: str):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {what}") from None


def envint(name: str, default: int) -> int:
    return _envnumber(name, default, int, "a whole number")


def envfloat(name: str, default: float) -> float:
    return _envnumber(name, default, float, "a number")


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str, base_dir) -> dict:
    """sqlite:///path, postgres://user:pass@host:port/name, mysql://... -> a DATABASES entry."""
    from urllib.parse import unquote, urlparse

    if not url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": base_dir / "var" / "db.sqlite3"}
    parsed = urlparse(url)
    engines = {"sqlite": "sqlite3", "postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql"}
    if parsed.scheme not in engines:
        raise ImproperlyConfigured(f"DATABASE_URL scheme {parsed.scheme!r} is not supported; "
                                   f"use one of {', '.join(sorted(engines))}")
    if parsed.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parsed.path[1:]) or ":memory:"}
    return {
        "ENGINE": f"django.db.backends.{engines[parsed.scheme]}",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
    }


def redis_db_url(url: str, db: int) -> str:
    """The same Redis server with another database number (Celery keeps apart from delayq). Only
    for one-server URLs: Celery spells Sentinel and Cluster its own way, so those need
    CELERY_BROKER_URL and CELERY_RESULT_BACKEND set (an empty string here: settings say so)."""
    from urllib.parse import urlparse, urlunparse

    if "+" in url.split("://", 1)[0]:
        return ""
    return urlunparse(urlparse(url)._replace(path=f"/{db}"))
