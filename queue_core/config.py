"""Engine configuration: a topic's (``TopicConfig``) and a consumer group's (``GroupConfig``).

A topic's fields live in each partition's ``config`` hash, a group's in the group's ``config``
hash in each partition; every script reads them. The defaults below are the only copy: scripts.py
renders them into the Lua TOPIC_DEFAULTS and GROUP_DEFAULTS tables, so a topic or group nobody
configured behaves exactly as ``TopicConfig()`` / ``GroupConfig()`` describe.

``TopicConfig`` also carries the default group's settings (visibility timeout, retry policy,
retention, paused): version 1's API, where a topic had exactly one set of consumers, keeps working.
"""

from dataclasses import asdict, dataclass, field, fields

from .errors import InvalidArgument
from .retry import RetryPolicy

DAY = 86400
EXPIRE_ACTIONS = ("dead", "drop")


def _check(what: str, checks: list[tuple[bool, str]]) -> None:
    problems = [msg for ok, msg in checks if not ok]
    if problems:
        raise InvalidArgument(f"invalid {what} configuration: " + "; ".join(problems))


def _replace(obj, kind: str, changes: dict):
    unknown = set(changes) - set(asdict(obj))
    if unknown:
        raise InvalidArgument(f"unknown {kind} option(s): {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(sorted(asdict(obj)))}")
    return type(obj)(**{**{f.name: getattr(obj, f.name) for f in fields(obj)}, **changes})


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One consumer group's settings. Each group has its own retries, leases and dead letters."""

    visibility_timeout: float = 30.0     # seconds a claimed message stays leased without ack/extend
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy.exponential(jitter=0.1))
    dead_max_count: int = 100_000        # dead letters kept (each partition its share); the oldest evicted as events
    dead_max_age: float = 14 * DAY       # seconds; 0 = keep forever
    paused: bool = False                 # workers do not claim; publishes and promotion go on
    ordered: bool = False                # at most one message per ordering key in flight, in publish order
    hold_key_on_dead: bool = False       # ordered: a dead letter keeps its key until replayed or deleted
    ttl: float = 0.0                     # default time to live (s) of messages without their own; 0 = none
    on_expire: str = "dead"              # what happens when a TTL runs out: "dead" (Expired) or "drop"

    def __post_init__(self) -> None:
        _check("group", [
            (self.visibility_timeout >= 0.01, "visibility_timeout must be at least 0.01 s"),
            (self.dead_max_count >= 0, "dead_max_count cannot be negative"),
            (self.dead_max_age >= 0, "dead_max_age cannot be negative (0 = keep forever)"),
            (isinstance(self.retry, RetryPolicy), "retry must be a RetryPolicy"),
            (self.ttl >= 0, "ttl cannot be negative (0 = no TTL)"),
            (self.on_expire in EXPIRE_ACTIONS, f"on_expire must be one of {', '.join(EXPIRE_ACTIONS)}"),
        ])

    def to_fields(self) -> dict[str, str]:
        out = {
            "visibility_timeout_ms": str(int(self.visibility_timeout * 1000)),
            "dead_max_count": str(self.dead_max_count),
            "dead_max_age_ms": str(int(self.dead_max_age * 1000)),
            "paused": "1" if self.paused else "0",
            "ordered": "1" if self.ordered else "0",
            "hold_on_dead": "1" if self.hold_key_on_dead else "0",
            "ttl_ms": str(int(self.ttl * 1000)),
            "on_expire": self.on_expire,
        }
        out.update(self.retry.to_fields())
        return out

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> "GroupConfig":
        """Missing fields take the defaults, exactly as the scripts do."""
        f = {**cls().to_fields(), **raw}
        return cls(
            visibility_timeout=int(f["visibility_timeout_ms"]) / 1000,
            retry=RetryPolicy.from_fields(f),
            dead_max_count=int(f["dead_max_count"]),
            dead_max_age=int(f["dead_max_age_ms"]) / 1000,
            paused=f["paused"] == "1",
            ordered=f["ordered"] == "1",
            hold_key_on_dead=f["hold_on_dead"] == "1",
            ttl=int(f["ttl_ms"]) / 1000,
            on_expire=f["on_expire"],
        )

    def replace(self, **changes) -> "GroupConfig":
        return _replace(self, "group", changes)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's settings, plus its default group's (version 1's single set of consumers)."""

    visibility_timeout: float = 30.0     # default group: seconds a claimed message stays leased
    max_payload_bytes: int = 1_048_576
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy.exponential(jitter=0.1))
    dead_max_count: int = 100_000        # default group: dead letters kept
    dead_max_age: float = 14 * DAY       # default group: seconds; 0 = keep forever
    events: bool = True                  # append transitions to the partition's event stream
    events_maxlen: int = 100_000         # approximate stream entries kept per partition (the archiver drains it)
    max_delay: float = 365 * DAY         # longest delay publish() accepts
    paused: bool = False                 # default group: workers do not claim
    history_max: int = 20                # transitions kept per message and group
    partitions: int = 1                  # only an empty topic may change it

    def __post_init__(self) -> None:
        from .keys import MAX_PARTITIONS
        _check("topic", [
            (self.visibility_timeout >= 0.01, "visibility_timeout must be at least 0.01 s"),
            (self.max_payload_bytes >= 1, "max_payload_bytes must be at least 1"),
            (self.dead_max_count >= 0, "dead_max_count cannot be negative"),
            (self.dead_max_age >= 0, "dead_max_age cannot be negative (0 = keep forever)"),
            (self.events_maxlen >= 1, "events_maxlen must be at least 1"),
            (self.max_delay > 0, "max_delay must be positive"),
            (1 <= self.history_max <= 1000, "history_max must be between 1 and 1000"),
            (isinstance(self.retry, RetryPolicy), "retry must be a RetryPolicy"),
            (isinstance(self.partitions, int) and 1 <= self.partitions <= MAX_PARTITIONS,
             f"partitions must be between 1 and {MAX_PARTITIONS}"),
        ])

    def topic_fields(self) -> dict[str, str]:
        """The fields of each partition's config hash (the layout is written beside them)."""
        return {
            "max_payload_bytes": str(self.max_payload_bytes),
            "events": "1" if self.events else "0",
            "events_maxlen": str(self.events_maxlen),
            "max_delay_ms": str(int(self.max_delay * 1000)),
            "history_max": str(self.history_max),
        }

    def default_group_fields(self) -> dict[str, str]:
        """The default group's fields that this config states (ordering and TTL are the group's)."""
        g = GroupConfig(visibility_timeout=self.visibility_timeout, retry=self.retry,
                        dead_max_count=self.dead_max_count, dead_max_age=self.dead_max_age, paused=self.paused)
        keep = ("visibility_timeout_ms", "dead_max_count", "dead_max_age_ms", "paused", *self.retry.to_fields())
        return {k: v for k, v in g.to_fields().items() if k in keep}

    def to_fields(self) -> dict[str, str]:
        return {**self.topic_fields(), **self.default_group_fields(), "partitions": str(self.partitions)}

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> "TopicConfig":
        """Missing fields take the defaults, exactly as the scripts do."""
        f = {**cls().to_fields(), **raw}
        return cls(
            visibility_timeout=int(f["visibility_timeout_ms"]) / 1000,
            max_payload_bytes=int(f["max_payload_bytes"]),
            retry=RetryPolicy.from_fields(f),
            dead_max_count=int(f["dead_max_count"]),
            dead_max_age=int(f["dead_max_age_ms"]) / 1000,
            events=f["events"] == "1",
            events_maxlen=int(f["events_maxlen"]),
            max_delay=int(f["max_delay_ms"]) / 1000,
            paused=f["paused"] == "1",
            history_max=int(f["history_max"]),
            partitions=int(f["partitions"]),
        )

    def replace(self, **changes) -> "TopicConfig":
        return _replace(self, "topic", changes)
