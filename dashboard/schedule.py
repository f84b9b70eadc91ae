"""delayq's periodic tasks, for a host project's Celery beat:

    from dashboard.schedule import beat_schedule
    CELERY_BEAT_SCHEDULE = {**beat_schedule(), ...your own entries...}

Importable from settings.py: it loads no models.
"""

from celery.schedules import crontab


def beat_schedule(*, archive_interval: float = 5.0, analytics_at: crontab | None = None,
                  metrics_refresh: float = 0.0) -> dict:
    """``metrics_refresh``: your DELAYQ_METRICS_REFRESH (seconds; 0 adds no metrics task)."""
    schedule = {
        # An operation whose worker died is picked up again (replay and purge are compare-and-set).
        "delayq-resume-stalled-operations": {"task": "delayq.resume_stalled_operations", "schedule": 60.0},
        # Often enough that no stream trims an event before it is archived (events_maxlen per topic).
        "delayq-archive-events": {"task": "delayq.archive_events", "schedule": archive_interval},
        # Alerts: evaluated every minute (the counters are per minute); deliveries and their retries
        # run as their own task, so a slow webhook never delays an evaluation.
        "delayq-evaluate-alerts": {"task": "delayq.evaluate_alerts", "schedule": 60.0},
        "delayq-deliver-alerts": {"task": "delayq.deliver_alerts", "schedule": 60.0},
        "delayq-nightly-analytics": {"task": "delayq.nightly_analytics",
                                     "schedule": analytics_at or crontab(hour=3, minute=17)},
    }
    if metrics_refresh:
        # A scrape of many topics costs ~1 s of pipeline and formatting: rendered here instead,
        # so scrapes read one key however many Prometheus servers ask.
        schedule["delayq-refresh-metrics"] = {"task": "delayq.refresh_metrics", "schedule": float(metrics_refresh)}
    return schedule
