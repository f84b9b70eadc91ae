"""Settings of the standalone delayq site. Everything a deployer sets comes from the environment;
see README.md "Configuration"."""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from dashboard.schedule import beat_schedule

from .env import database_from_url, envbool, envfloat, envint, envlist, envstr, redis_db_url

BASE_DIR = Path(__file__).resolve().parent.parent
INSECURE_DEFAULT_SECRET = "delayq-insecure-development-key-do-not-use-in-production"

DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY", INSECURE_DEFAULT_SECRET)
if not DEBUG and SECRET_KEY == INSECURE_DEFAULT_SECRET:
    raise ImproperlyConfigured(
        "DEBUG is off but SECRET_KEY is the built-in development key: set SECRET_KEY in the environment "
        "to a long random value (python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
        "or set DEBUG=1 for local development."
    )
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The site's own templates: its error pages and its override of the app's brand (templates/).
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

DATABASES = {"default": database_from_url(envstr("DATABASE_URL", ""), BASE_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "delayq:login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "delayq:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
# TLS is the deployer's to set up; these turn on HSTS and the HTTPS redirect once it is.
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
if envbool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"

# The queue: one Redis for the engine, Celery's broker and results (separate db numbers).
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
DELAYQ_REDIS_URL = envstr("DELAYQ_REDIS_URL", REDIS_URL)
# The other DELAYQ_* settings have their defaults in dashboard/conf.py; the environment overrides them.
_DELAYQ_FROM_ENV = {"DELAYQ_PREFIX": envstr, "DELAYQ_ARCHIVE_DIR": envstr, "DELAYQ_ARCHIVE_MAX_WAIT": envfloat,
                    "DELAYQ_ANALYTICS_DIR": envstr, "DELAYQ_ANALYTICS_DAYS": envint, "DELAYQ_LOGIN_URL": envstr,
                    "DELAYQ_REDIS_WAIT_REPLICAS": envint, "DELAYQ_REDIS_WAIT_TIMEOUT": envfloat,
                    "DELAYQ_REDIS_TLS_CA_FILE": envstr, "DELAYQ_REDIS_TLS_CERT_FILE": envstr,
                    "DELAYQ_REDIS_TLS_KEY_FILE": envstr, "DELAYQ_REDIS_TLS_INSECURE": envbool,
                    "DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP": envbool, "DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS": envlist,
                    "DELAYQ_ALERT_WEBHOOK_DEADLINE": envfloat}
globals().update({name: read(name, None) for name, read in _DELAYQ_FROM_ENV.items() if name in os.environ})
DELAYQ_METRICS = os.environ.get("DELAYQ_METRICS", "") in ("1", "true", "yes")   # Prometheus at /metrics
DELAYQ_METRICS_TOKEN = os.environ.get("DELAYQ_METRICS_TOKEN", "")
DELAYQ_METRICS_REFRESH = envfloat("DELAYQ_METRICS_REFRESH", 0.0)   # > 0: rendered in the background by beat
DELAYQ_ALERT_WEBHOOK_SECRET = os.environ.get("DELAYQ_ALERT_WEBHOOK_SECRET", "")

# E-mail (alerts): SMTP when SMTP_HOST is set, else printed to the console (the run command's log).
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "delayq@localhost")
if os.environ.get("SMTP_HOST"):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": {
        "host": os.environ["SMTP_HOST"], "port": envint("SMTP_PORT", 587), "username": envstr("SMTP_USER", ""),
        "password": envstr("SMTP_PASSWORD", ""), "use_tls": envbool("SMTP_TLS", True), "timeout": 10}}}
else:
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}

CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", redis_db_url(REDIS_URL, 1))
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", redis_db_url(REDIS_URL, 2))
if not (CELERY_BROKER_URL and CELERY_RESULT_BACKEND):
    raise ImproperlyConfigured(
        f"REDIS_URL is a {REDIS_URL.split('://')[0]}:// URL, which Celery does not read: set CELERY_BROKER_URL and "
        "CELERY_RESULT_BACKEND too (for Sentinel, Celery's form is sentinel://host:port;sentinel://host:port with "
        "CELERY_BROKER_TRANSPORT_OPTIONS master_name), or set DELAYQ_REDIS_URL alone and keep REDIS_URL a redis:// URL")
CELERY_TASK_TRACK_STARTED = True
CELERY_BEAT_SCHEDULE = beat_schedule(archive_interval=envfloat("DELAYQ_ARCHIVE_INTERVAL", 5.0),
                                     metrics_refresh=DELAYQ_METRICS_REFRESH if DELAYQ_METRICS else 0.0)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_WORKER_CONCURRENCY = envint("CELERY_WORKER_CONCURRENCY", 2)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
