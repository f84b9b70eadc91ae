"""delayq's Django app (label "delayq"). See docs/install.md."""


def publish_on_commit(topic: str, payload, *, using: str | None = None, **publish_kwargs) -> None:
    """Publish to ``topic`` after the surrounding transaction commits (nothing on rollback).
    See dashboard.services.publishing."""
    from .services.publishing import publish_on_commit as publish

    publish(topic, payload, using=using, **publish_kwargs)
