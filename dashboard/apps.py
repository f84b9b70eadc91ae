from django.apps import AppConfig


class DelayqConfig(AppConfig):
    # The package is "dashboard"; the label is distinctive so that it never collides with a host
    # project's own "dashboard" app (tables delayq_*, permissions delayq.*, URL namespace delayq).
    name = "dashboard"
    label = "delayq"
    verbose_name = "delayq"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks, signals  # noqa: F401 - registers the system checks, connects the sync receivers
