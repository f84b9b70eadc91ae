"""The site's Celery app. Broker and results default to the queue's Redis on db 1 and 2
(settings.py), so Celery's keys never mix with delayq's."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("delayq")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
