"""Dispatch limits and memory budgets as operators set them in the admin: a rate of claims, a cap on messages in
flight, both also per fairness key, and fairness weights. Topic rows hold their default group's,
ConsumerGroup rows their own (services/config_map.py maps them to the engine's GroupConfig, whose
checks they reuse). Running workers apply a change at their next claim: the engine reads a group's
configuration on every claim, so the sync after the save is all it takes. A Topic row's memory
budget (``MemoryBudget``) is read by every publish the same way."""

from django.core.validators import MinValueValidator
from django.db import models

from .services import config_map

PERIOD_HELP = f"Seconds the count is per; blank = {config_map.DEFAULT_PERIOD:g} s."


class DispatchLimits(models.Model):
    """Blank means no limit. Zero or negative numbers are refused with the engine's own words."""

    rate_count = models.IntegerField(
        null=True, blank=True, verbose_name="rate: claims",
        help_text="At most this many claims per period for the whole group (all workers, all partitions).")
    rate_period = models.FloatField(null=True, blank=True, verbose_name="rate: per seconds", help_text=PERIOD_HELP)
    max_in_flight = models.IntegerField(
        null=True, blank=True, help_text="At most this many claimed and not yet acked at once, the whole group "
                                         "(at least the topic's partition count: each partition keeps a share).")
    key_rate_count = models.IntegerField(
        null=True, blank=True, verbose_name="per key rate: claims",
        help_text="At most this many claims per period for each fairness key.")
    key_rate_period = models.FloatField(null=True, blank=True, verbose_name="per key rate: per seconds",
                                        help_text=PERIOD_HELP)
    max_in_flight_per_key = models.IntegerField(
        null=True, blank=True, help_text="At most this many in flight at once for each fairness key.")
    fairness_weights = models.JSONField(
        default=dict, blank=True,
        help_text='Empty: fairness keys take equal turns. Or weights, e.g. {"acme": 3, "*": 1} ("*": every other key).')

    class Meta:
        abstract = True

    def limit_problems(self, partitions: int) -> dict[str, list[str]]:
        return config_map.limit_problems(self, partitions)

    @property
    def limits_in_words(self) -> str:
        """What the row asks for ("at most 100 per 1 s; ..."), or why it cannot be."""
        try:
            return config_map.GroupConfig(**config_map.limit_options(self)).limits_in_words()
        except config_map.InvalidArgument as exc:
            return f"invalid: {exc}"


class MemoryBudget(models.Model):
    """A topic's memory budget (TopicConfig.max_messages / max_bytes): above it publish is refused
    with TopicFull (HTTP 507 from the API) instead of Redis failing every write once full. Blank
    means no budget; each partition enforces its share (the limit divided by the partitions)."""

    max_messages = models.PositiveBigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], verbose_name="budget: messages",
        help_text="Refuse publishing above this many stored messages (each partition its share). Blank = no budget.")
    max_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], verbose_name="budget: bytes",
        help_text="Refuse publishing above this many bytes of message store, as Redis's MEMORY USAGE estimates it "
                  "(each partition its share). Blank = no budget.")

    class Meta:
        abstract = True
