"""Settings for the test suite: the standalone site with a test-only secret. Real servers (Redis,
Celery) are started by the fixtures, which point the settings at them."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-never-used-outside-pytest-0123456789")
os.environ.setdefault("DEBUG", "0")

from .settings import *  # noqa: E402,F403

ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# A file, not :memory:, so a real Celery worker process started by the tests sees the same data.
(BASE_DIR / "var").mkdir(exist_ok=True)  # noqa: F405 - absent on a fresh clone
DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / "test-db.sqlite3")}  # noqa: F405
