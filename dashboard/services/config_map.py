"""Which engine settings the Django rows own, in both directions: rows -> engine config (the sync)
and engine config -> row fields (adoption).

A Topic row owns the topic fields in ``TOPIC_FIELDS`` plus its retry policy; a ConsumerGroup row
owns ``GROUP_FIELDS`` plus its retry policy. Every other engine setting (``TOPIC_ENGINE_ONLY``,
``GROUP_ENGINE_ONLY``, and the default group's ``DEFAULT_GROUP_ENGINE_ONLY``) is set from Python
with ``configure_topic`` / ``configure_group`` and must survive any save in the admin: a row is
always laid over the engine's current configuration, never over the defaults.

A ``celery.*`` topic belongs to the Celery bridge: its rows own only ``paused``.
"""

from dataclasses import fields

from .contracts import EngineRetryPolicy, GroupConfig, TopicConfig, is_bridge_topic

# Django RetryPolicy field -> engine RetryPolicy field.
POLICY_FIELDS = {"kind": "kind", "base_delay": "base", "factor": "factor", "max_delay": "max_delay",
                 "schedule": "schedule", "jitter": "jitter", "max_attempts": "max_attempts"}
# Same name on the Django row and in the engine's config (``retry`` comes from the row's retry_policy).
TOPIC_FIELDS = ("visibility_timeout", "max_payload_bytes", "dead_max_count", "dead_max_age", "events", "paused",
                "partitions")
GROUP_FIELDS = ("visibility_timeout", "dead_max_count", "dead_max_age", "ordered", "ttl", "on_expire", "paused")

TOPIC_ENGINE_ONLY = tuple(f.name for f in fields(TopicConfig) if f.name not in (*TOPIC_FIELDS, "retry"))
GROUP_ENGINE_ONLY = tuple(f.name for f in fields(GroupConfig) if f.name not in (*GROUP_FIELDS, "retry"))
# The default group's settings that TopicConfig does not state (configure_topic leaves them alone).
DEFAULT_GROUP_ENGINE_ONLY = tuple(f.name for f in fields(GroupConfig) if f.name not in {f.name for f in fields(TopicConfig)})

# What an operator may still change on a Celery bridge topic (and its groups) from Django.
BRIDGE_FIELDS = ("paused",)
BRIDGE_REFUSAL = ("{name} belongs to the Celery bridge (celery.* topics are written only by the bridge, which "
                  "signs what it stores): its configuration cannot be changed in the dashboard; only pause and "
                  "resume are allowed. Change the bridge's settings in the Celery app instead.")


def _kind(value) -> str:
    return getattr(value, "value", value)   # a Django TextChoices member or its plain string


def policy_to_engine(row) -> EngineRetryPolicy:
    """A Django RetryPolicy row as the engine's policy; raises InvalidArgument for nonsense."""
    schedule = row.schedule if isinstance(row.schedule, list) else []
    return EngineRetryPolicy(
        kind=_kind(row.kind), base=float(row.base_delay), factor=float(row.factor), max_delay=float(row.max_delay),
        schedule=tuple(float(s) for s in schedule) if _kind(row.kind) == "custom" else (),
        jitter=float(row.jitter), max_attempts=int(row.max_attempts or 0))


def policy_row_fields(policy: EngineRetryPolicy) -> dict:
    """The engine's policy as Django RetryPolicy field values (the inverse of policy_to_engine)."""
    out = {model_field: getattr(policy, engine_field) for model_field, engine_field in POLICY_FIELDS.items()}
    out["schedule"] = list(policy.schedule)
    return out


def _owned(topic_name: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in names if n in BRIDGE_FIELDS) if is_bridge_topic(topic_name) else names


def topic_config(row, current: TopicConfig | None = None) -> TopicConfig:
    """``current`` (the engine's configuration; defaults when None) with the fields ``row`` owns
    replaced, so nothing set from Python is lost."""
    current = current or TopicConfig()
    owned = _owned(row.name, TOPIC_FIELDS)
    changes = {name: type(getattr(current, name))(getattr(row, name)) for name in owned}
    if not is_bridge_topic(row.name):
        changes["retry"] = policy_to_engine(row.retry_policy)
    return current.replace(**changes)


def group_config(row, current: GroupConfig | None = None) -> GroupConfig:
    """As topic_config, for a ConsumerGroup row."""
    current = current or GroupConfig()
    owned = _owned(row.topic.name, GROUP_FIELDS)
    changes = {name: type(getattr(current, name))(getattr(row, name)) for name in owned}
    if not is_bridge_topic(row.topic.name):
        changes["retry"] = policy_to_engine(row.retry_policy)
    return current.replace(**changes)


def topic_row_fields(cfg: TopicConfig) -> dict:
    """The engine's topic configuration as Topic field values (the retry policy aside)."""
    return {name: getattr(cfg, name) for name in TOPIC_FIELDS}


def group_row_fields(cfg: GroupConfig) -> dict:
    """The engine's group configuration as ConsumerGroup field values (the retry policy aside)."""
    return {name: getattr(cfg, name) for name in GROUP_FIELDS}


def locked_changes(row, stored, names: tuple[str, ...]) -> list[str]:
    """The fields of ``names`` (and the retry policy) that ``row`` changes compared with ``stored``
    and that a bridge topic's row may not change."""
    changed = [n for n in names if n not in BRIDGE_FIELDS and getattr(row, n) != getattr(stored, n)]
    if row.retry_policy_id != stored.retry_policy_id:
        changed.append("retry_policy")
    return changed
