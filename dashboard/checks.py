"""System checks: a bad DELAYQ_* value or a missing Celery app shows in ``manage.py check``, not as a
crash on the first page."""

from django.core.checks import Error, Tags, Warning, register

from . import conf


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    return [Error(f"{name} {problem}.", hint=f"{name}: {conf.SETTINGS[name].doc}; see delayq's install guide.",
                  id="delayq.E001")
            for name, problem in conf.problems()]


@register(Tags.compatibility)
def check_celery(app_configs=None, **kwargs):
    """Bulk replay and purge, archiving and analytics run as Celery tasks; without a configured app
    they would go to Celery's fallback app (amqp://localhost) and never run."""
    from celery import current_app

    app = current_app._get_current_object()
    if app.main == "default" and not app.conf.broker_url:
        return [Warning(
            "No Celery app is configured, so delayq's background tasks (bulk replay and purge, archiving, "
            "analytics) cannot be queued.",
            hint="Create a Celery app in your project (app.config_from_object('django.conf:settings', "
                 "namespace='CELERY'); app.autodiscover_tasks()), import it in your project's __init__.py, "
                 "set CELERY_BROKER_URL and run 'celery -A <project> worker'.",
            id="delayq.W001")]
    return []
