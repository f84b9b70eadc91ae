"""A host project at its barest: delayq installed, no Celery app, nothing else configured."""

BASE_DIR = "/tmp/delayq-bare-host"
SECRET_KEY = "bare-host-settings-for-tests-only-0123456789-abcdefghijklmnop"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                  "django.contrib.messages", "django_htmx", "dashboard"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
