"""Saving a Topic, a ConsumerGroup or a RetryPolicy syncs the engine config of every affected
topic after commit."""

from django.db.models.signals import post_save
from django.dispatch import receiver

from . import services
from .models import ConsumerGroup, RetryPolicy, Topic


@receiver(post_save, sender=Topic)
def topic_saved(sender, instance: Topic, **kwargs):
    services.sync_after_commit([instance.pk])


@receiver(post_save, sender=ConsumerGroup)
def group_saved(sender, instance: ConsumerGroup, **kwargs):
    services.sync_after_commit([instance.topic_id])


@receiver(post_save, sender=RetryPolicy)
def policy_saved(sender, instance: RetryPolicy, **kwargs):
    ids = set(instance.topics.values_list("pk", flat=True)) | set(instance.groups.values_list("topic_id", flat=True))
    services.sync_after_commit(ids)
