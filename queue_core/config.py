"""Engine configuration: a topic's (``TopicConfig``) and a consumer group's (``GroupConfig``).

A topic's fields live in each partition's ``config`` hash, a group's in the group's ``config``
hash in each partition; every script reads them. The defaults below are the only copy: scripts.py
renders them into the Lua TOPIC_DEFAULTS and GROUP_DEFAULTS tables, so a topic or group nobody
configured behaves exactly as ``TopicConfig()`` / ``GroupConfig()`` describe.

``TopicConfig`` also carries the default group's settings (visibility timeout, retry policy,
retention, paused): version 1's API, where a topic had exactly one set of consumers, keeps working.
"""

import json
import math
from dataclasses import asdict, dataclass, field, fields

from .errors import InvalidArgument
from .retry import RetryPolicy

DAY = 86400
EXPIRE_ACTIONS = ("dead", "drop")
FAIRNESS_KEY_MAX_BYTES = 256
ROUND_ROBIN = "round_robin"


def check_fairness_key(key: str) -> str:
    """A fairness key is 1-256 bytes of UTF-8 without NUL (the separator of the fairness index)."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"fairness_key must be a non-empty string, not {key!r}")
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > FAIRNESS_KEY_MAX_BYTES or "\0" in key:
        raise InvalidArgument(f"fairness_key must be at most {FAIRNESS_KEY_MAX_BYTES} bytes without NUL "
                              f"characters (got {size} bytes)")
    return key


def _rate_problems(name: str, rate) -> list[tuple[bool, str]]:
    if rate is None:
        return []
    ok = (isinstance(rate, tuple | list) and len(rate) == 2 and isinstance(rate[0], int)
          and not isinstance(rate[0], bool) and isinstance(rate[1], int | float) and not isinstance(rate[1], bool))
    if not ok:
        return [(False, f"{name} must be (count, seconds), e.g. (100, 1.0), or None")]
    n, per = rate
    return [(n >= 1, f"{name}: the count must be at least 1 (got {n}; None means no limit)"),
            (math.isfinite(per) and 0.001 <= per <= DAY, f"{name}: the period must be between 0.001 s and one day")]


def _limit_problems(name: str, value) -> list[tuple[bool, str]]:
    if value is None:
        return []
    return [(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
             f"{name} must be a whole number of at least 1, or None (no limit)")]


def _fairness_problems(fairness) -> list[tuple[bool, str]]:
    if fairness == ROUND_ROBIN:
        return []
    if not isinstance(fairness, dict) or not fairness:
        return [(False, f"fairness must be {ROUND_ROBIN!r} or a dict of weights such as {{'acme': 3, '*': 1}}")]
    out = []
    for key, weight in fairness.items():
        if key != "*":
            try:
                check_fairness_key(key)
            except InvalidArgument as e:
                out.append((False, f"fairness weight key {str(key)[:40]!r}: {e}"))
        good = isinstance(weight, int | float) and not isinstance(weight, bool) and math.isfinite(weight)
        out.append((good and 0 < weight <= 1000, f"fairness weight of {str(key)[:40]!r} must be a number in (0, 1000]"))
    return out


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
    # Dispatch control (claim.lua, includes/dispatch.lua): None = no limit.
    rate: tuple[int, float] | None = None          # at most n claims per s seconds, the whole group
    max_in_flight: int | None = None               # at most n unacked at once, the whole group
    key_rate: tuple[int, float] | None = None      # per fairness key
    max_in_flight_per_key: int | None = None       # per fairness key
    fairness: str | dict = ROUND_ROBIN             # or weights {"acme": 3, "*": 1}; applies when keys exist

    def __post_init__(self) -> None:
        if isinstance(self.rate, list):
            object.__setattr__(self, "rate", tuple(self.rate))
        if isinstance(self.key_rate, list):
            object.__setattr__(self, "key_rate", tuple(self.key_rate))
        _check("group", [
            *_rate_problems("rate", self.rate), *_rate_problems("key_rate", self.key_rate),
            *_limit_problems("max_in_flight", self.max_in_flight),
            *_limit_problems("max_in_flight_per_key", self.max_in_flight_per_key),
            *_fairness_problems(self.fairness),
        ])
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
            "rate_n": str(self.rate[0]) if self.rate else "0",
            "rate_ms": str(round(self.rate[1] * 1000)) if self.rate else "0",
            "mif": str(self.max_in_flight or 0),
            "key_rate_n": str(self.key_rate[0]) if self.key_rate else "0",
            "key_rate_ms": str(round(self.key_rate[1] * 1000)) if self.key_rate else "0",
            "mif_key": str(self.max_in_flight_per_key or 0),
            "fairness": "" if self.fairness == ROUND_ROBIN else json.dumps(self.fairness, sort_keys=True),
        }
        out.update(self.retry.to_fields())
        return out

    def limits_in_words(self) -> str:
        """The dispatch limits as an operator reads them (the CLI, the topic page)."""
        def rate(r):
            return f"{r[0]:,} per {r[1]:g} s"
        parts = []
        if self.rate:
            parts.append(f"at most {rate(self.rate)}")
        if self.max_in_flight:
            parts.append(f"at most {self.max_in_flight:,} in flight")
        per_key = [f"{rate(self.key_rate)}"] if self.key_rate else []
        if self.max_in_flight_per_key:
            per_key.append(f"{self.max_in_flight_per_key:,} in flight")
        if per_key:
            parts.append("per fairness key " + " and ".join(per_key))
        if self.fairness != ROUND_ROBIN:
            weights = ", ".join(f"{k} x{w:g}" for k, w in sorted(self.fairness.items()))
            parts.append(f"fairness weights {weights}")
        return "; ".join(parts) if parts else "no limits (keys, when messages have them, take turns)"

    @property
    def limited(self) -> bool:
        """True when any dispatch limit is set."""
        return bool(self.rate or self.max_in_flight or self.key_rate or self.max_in_flight_per_key)

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
            rate=(int(f["rate_n"]), int(f["rate_ms"]) / 1000) if int(f["rate_n"]) else None,
            max_in_flight=int(f["mif"]) or None,
            key_rate=(int(f["key_rate_n"]), int(f["key_rate_ms"]) / 1000) if int(f["key_rate_n"]) else None,
            max_in_flight_per_key=int(f["mif_key"]) or None,
            fairness=json.loads(f["fairness"]) if f["fairness"] else ROUND_ROBIN,
        )

    def replace(self, **changes) -> "GroupConfig":
        return _replace(self, "group", changes)


def budget_share(limit: int, partitions: int) -> int:
    """A partition's share of a topic's budget (includes/budget.lua computes the same): no script
    spans partitions, so each enforces the limit divided by the partitions, rounded up."""
    return -(-limit // partitions)


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
    # Memory budget (includes/budget.lua): publish is refused with TopicFull above it; each
    # partition enforces its share (the limit divided by the partitions, rounded up). None = none.
    max_messages: int | None = None      # messages stored (each once, whatever its groups)
    max_bytes: int | None = None         # bytes of the message store, as Redis's MEMORY USAGE estimates it

    def __post_init__(self) -> None:
        from .keys import MAX_PARTITIONS
        for name in ("max_messages", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InvalidArgument(f"{name} must be a positive whole number (or None for no budget), "
                                      f"not {value!r}")
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
            "max_messages": str(self.max_messages or 0),   # '0' = no budget (the scripts' default)
            "max_bytes": str(self.max_bytes or 0),
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
            max_messages=int(f["max_messages"]) or None,
            max_bytes=int(f["max_bytes"]) or None,
        )

    def replace(self, **changes) -> "TopicConfig":
        return _replace(self, "topic", changes)
