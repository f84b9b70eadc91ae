"""Which engine settings the Django rows own, in both directions: rows -> engine config (the sync)
and engine config -> row fields (adoption).

A Topic row owns the topic fields in ``TOPIC_FIELDS`` plus its retry policy; a ConsumerGroup row
owns ``GROUP_FIELDS`` plus its retry policy. Both own the dispatch limits (``LIMITS``; the Topic
row its default group's), held in the row fields ``LIMIT_ROW_FIELDS`` names. Every other engine
setting (``TOPIC_ENGINE_ONLY``, ``GROUP_ENGINE_ONLY``, and the default group's
``DEFAULT_GROUP_ENGINE_ONLY``) is set from Python with ``configure_topic`` / ``configure_group``
and must survive any save in the admin: a row is always laid over the engine's current
configuration, never over the defaults.

A ``celery.*`` topic belongs to the Celery bridge: its rows own only ``paused``.
"""

from dataclasses import fields

from .contracts import (
    ROUND_ROBIN,
    EngineRetryPolicy,
    GroupConfig,
    InvalidArgument,
    TopicConfig,
    is_bridge_topic,
)

# Django RetryPolicy field -> engine RetryPolicy field.
POLICY_FIELDS = {"kind": "kind", "base_delay": "base", "factor": "factor", "max_delay": "max_delay",
                 "schedule": "schedule", "jitter": "jitter", "max_attempts": "max_attempts"}
# Same name on the Django row and in the engine's config (``retry`` comes from the row's retry_policy).
TOPIC_FIELDS = ("visibility_timeout", "max_payload_bytes", "dead_max_count", "dead_max_age", "events", "paused",
                "partitions")
# The memory budget (models_limits.MemoryBudget): a blank row field is None, no budget, as in TopicConfig.
BUDGET_FIELDS = ("max_messages", "max_bytes")
GROUP_FIELDS = ("visibility_timeout", "dead_max_count", "dead_max_age", "ordered", "ttl", "on_expire", "paused")
# Engine dispatch limit -> the row fields that hold it (models_limits.DispatchLimits): a rate is a
# count and a period, fairness weights a JSON object ({} = round robin).
LIMIT_ROW_FIELDS = {"rate": ("rate_count", "rate_period"), "max_in_flight": ("max_in_flight",),
                    "key_rate": ("key_rate_count", "key_rate_period"),
                    "max_in_flight_per_key": ("max_in_flight_per_key",), "fairness": ("fairness_weights",)}
LIMITS = tuple(LIMIT_ROW_FIELDS)
LIMIT_FIELDS = tuple(f for names in LIMIT_ROW_FIELDS.values() for f in names)
DEFAULT_PERIOD = 1.0    # seconds, when a rate's count is given without a period

TOPIC_ENGINE_ONLY = tuple(f.name for f in fields(TopicConfig) if f.name not in (*TOPIC_FIELDS, *BUDGET_FIELDS, "retry"))
GROUP_ENGINE_ONLY = tuple(f.name for f in fields(GroupConfig) if f.name not in (*GROUP_FIELDS, *LIMITS, "retry"))
# The default group's settings that neither TopicConfig states (configure_topic leaves them alone)
# nor the Topic row's limits.
DEFAULT_GROUP_ENGINE_ONLY = tuple(f.name for f in fields(GroupConfig)
                                  if f.name not in {f.name for f in fields(TopicConfig)} | set(LIMITS))

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


def _rate(count, period):
    return None if count is None else (count, DEFAULT_PERIOD if period is None else float(period))


def limit_options(row) -> dict:
    """The row's dispatch limits as GroupConfig options (blank = no limit). Zero and negative
    values are passed on as they are, for the engine to refuse in its own words."""
    return {"rate": _rate(row.rate_count, row.rate_period), "max_in_flight": row.max_in_flight,
            "key_rate": _rate(row.key_rate_count, row.key_rate_period),
            "max_in_flight_per_key": row.max_in_flight_per_key,
            "fairness": row.fairness_weights or ROUND_ROBIN}


def limit_row_fields(cfg: GroupConfig) -> dict:
    """The engine's dispatch limits as row field values (the inverse of limit_options)."""
    return {"rate_count": cfg.rate[0] if cfg.rate else None, "rate_period": cfg.rate[1] if cfg.rate else None,
            "max_in_flight": cfg.max_in_flight,
            "key_rate_count": cfg.key_rate[0] if cfg.key_rate else None,
            "key_rate_period": cfg.key_rate[1] if cfg.key_rate else None,
            "max_in_flight_per_key": cfg.max_in_flight_per_key,
            "fairness_weights": {} if cfg.fairness == ROUND_ROBIN else dict(cfg.fairness)}


def limit_problems(row, partitions: int) -> dict[str, list[str]]:
    """Row field -> what the engine says is wrong with it (each limit checked on its own, so each
    message lands on its field). ``partitions``: the topic's, which max_in_flight must cover."""
    errors: dict[str, list[str]] = {}
    options = limit_options(row)
    for limit, value in options.items():
        try:
            GroupConfig(**{limit: value})
        except InvalidArgument as exc:
            text = str(exc).removeprefix("invalid group configuration: ")
            names = LIMIT_ROW_FIELDS[limit]
            # "rate: the period must be ..." belongs to the period's field.
            errors.setdefault(names[-1] if "period" in text else names[0], []).append(text)
    mif = options["max_in_flight"]
    if "max_in_flight" not in errors and mif is not None and mif < partitions:
        # configure_group refuses it too; said here so the form shows it instead of a failed sync.
        errors["max_in_flight"] = [f"max_in_flight={mif} is below the topic's {partitions} partitions: each "
                                   "partition keeps a share of the limit (at least 1), so it must be at least "
                                   f"{partitions}"]
    rate = options["rate"]
    if "rate" not in errors and rate is not None and rate[0] < partitions:
        names = LIMIT_ROW_FIELDS["rate"]
        errors.setdefault(names[0], []).append(
            f"a rate of {rate[0]} per period is below the topic's {partitions} partitions: each partition keeps a "
            f"share of the rate (its first burst at least 1), so the count must be at least {partitions}")
    return errors


def topic_config(row, current: TopicConfig | None = None) -> TopicConfig:
    """``current`` (the engine's configuration; defaults when None) with the fields ``row`` owns
    replaced, so nothing set from Python is lost."""
    current = current or TopicConfig()
    owned = _owned(row.name, TOPIC_FIELDS)
    changes = {name: type(getattr(current, name))(getattr(row, name)) for name in owned}
    if not is_bridge_topic(row.name):
        changes["retry"] = policy_to_engine(row.retry_policy)
        changes.update({name: getattr(row, name) for name in BUDGET_FIELDS})
    return current.replace(**changes)


def group_config(row, current: GroupConfig | None = None) -> GroupConfig:
    """As topic_config, for a ConsumerGroup row."""
    current = current or GroupConfig()
    owned = _owned(row.topic.name, GROUP_FIELDS)
    changes = {name: type(getattr(current, name))(getattr(row, name)) for name in owned}
    if not is_bridge_topic(row.topic.name):
        changes["retry"] = policy_to_engine(row.retry_policy)
        changes.update(limit_options(row))
    return current.replace(**changes)


def default_group_config(row, current: GroupConfig | None = None) -> GroupConfig:
    """The default group's configuration ``current`` with the Topic row's dispatch limits laid over
    it (its other settings travel with the topic's, see TopicConfig.default_group_fields)."""
    current = current or GroupConfig()
    return current if is_bridge_topic(row.name) else current.replace(**limit_options(row))


def topic_row_fields(cfg: TopicConfig) -> dict:
    """The engine's topic configuration as Topic field values (the retry policy aside)."""
    return {name: getattr(cfg, name) for name in (*TOPIC_FIELDS, *BUDGET_FIELDS)}


def group_row_fields(cfg: GroupConfig) -> dict:
    """The engine's group configuration as ConsumerGroup field values (the retry policy aside)."""
    return {**{name: getattr(cfg, name) for name in GROUP_FIELDS}, **limit_row_fields(cfg)}


def locked_changes(row, stored, names: tuple[str, ...]) -> list[str]:
    """The fields of ``names`` (and the retry policy) that ``row`` changes compared with ``stored``
    and that a bridge topic's row may not change."""
    changed = [n for n in (*names, *LIMIT_FIELDS) if n not in BRIDGE_FIELDS and getattr(row, n) != getattr(stored, n)]
    if row.retry_policy_id != stored.retry_policy_id:
        changed.append("retry_policy")
    return changed
