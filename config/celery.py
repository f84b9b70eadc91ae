"""The site's Celery app. Broker and results default to the queue's Redis on db 1 and 2
(settings.py), so Celery's keys never mix with delayq's. Tasks sent with a countdown or ETA are
scheduled by delayq (queue_core.contrib.celery_bridge) and handed to the broker by the celery-forwarder
that ./scripts/run starts."""

import os

from celery import Celery

from queue_core import DelayQueue
from queue_core.connect import tls_options_from_env
from queue_core.contrib.celery_bridge import DelayqScheduling

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("delayq")
DelayqScheduling(app, queue=DelayQueue.from_url(
    os.environ.get("DELAYQ_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
    actor="celery", tls=tls_options_from_env() or None))
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
