"""Saving a Topic or a RetryPolicy syncs the engine config of every affected topic after commit."""

from django.db.models.signals import post_save
from django.dispatch import receiver

from . import services
from .models import RetryPolicy, Topic


@receiver(post_save, sender=Topic)
def topic_saved(sender, instance: Topic, **kwargs):
    services.sync_after_commit([instance.pk])


@receiver(post_save, sender=RetryPolicy)
def policy_saved(sender, instance: RetryPolicy, **kwargs):
    services.sync_after_commit(instance.topics.values_list("pk", flat=True))
