"""Per-topic engine configuration, stored in the topic's ``config`` hash and read by every script.

The defaults below are the only copy: scripts.py renders them into the Lua DEFAULTS table, so a
topic nobody configured behaves exactly as ``TopicConfig()`` describes.
"""

from dataclasses import asdict, dataclass, field

from .errors import InvalidArgument
from .retry import RetryPolicy

DAY = 86400


@dataclass(frozen=True, slots=True)
class TopicConfig:
    visibility_timeout: float = 30.0     # seconds a claimed message stays leased without ack/extend
    max_payload_bytes: int = 1_048_576
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy.exponential(jitter=0.1))
    dead_max_count: int = 100_000        # dead letters kept; the oldest are evicted (as events) past it
    dead_max_age: float = 14 * DAY       # seconds; 0 = keep forever
    events: bool = True                  # append every transition to the topic's event stream
    events_maxlen: int = 100_000         # approximate stream length kept in Redis (the archiver drains it)
    max_delay: float = 365 * DAY         # longest delay publish() accepts
    paused: bool = False                 # workers do not claim; publishes and promotion go on
    history_max: int = 20                # transitions kept per message

    def __post_init__(self) -> None:
        checks = [
            (self.visibility_timeout >= 0.01, "visibility_timeout must be at least 0.01 s"),
            (self.max_payload_bytes >= 1, "max_payload_bytes must be at least 1"),
            (self.dead_max_count >= 0, "dead_max_count cannot be negative"),
            (self.dead_max_age >= 0, "dead_max_age cannot be negative (0 = keep forever)"),
            (self.events_maxlen >= 1, "events_maxlen must be at least 1"),
            (self.max_delay > 0, "max_delay must be positive"),
            (1 <= self.history_max <= 1000, "history_max must be between 1 and 1000"),
            (isinstance(self.retry, RetryPolicy), "retry must be a RetryPolicy"),
        ]
        problems = [msg for ok, msg in checks if not ok]
        if problems:
            raise InvalidArgument("invalid topic configuration: " + "; ".join(problems))

    def to_fields(self) -> dict[str, str]:
        fields = {
            "visibility_timeout_ms": str(int(self.visibility_timeout * 1000)),
            "max_payload_bytes": str(self.max_payload_bytes),
            "dead_max_count": str(self.dead_max_count),
            "dead_max_age_ms": str(int(self.dead_max_age * 1000)),
            "events": "1" if self.events else "0",
            "events_maxlen": str(self.events_maxlen),
            "max_delay_ms": str(int(self.max_delay * 1000)),
            "paused": "1" if self.paused else "0",
            "history_max": str(self.history_max),
        }
        fields.update(self.retry.to_fields())
        return fields

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> "TopicConfig":
        """Missing fields take the defaults, exactly as the scripts do."""
        fields = {**cls().to_fields(), **raw}
        return cls(
            visibility_timeout=int(fields["visibility_timeout_ms"]) / 1000,
            max_payload_bytes=int(fields["max_payload_bytes"]),
            retry=RetryPolicy.from_fields(fields),
            dead_max_count=int(fields["dead_max_count"]),
            dead_max_age=int(fields["dead_max_age_ms"]) / 1000,
            events=fields["events"] == "1",
            events_maxlen=int(fields["events_maxlen"]),
            max_delay=int(fields["max_delay_ms"]) / 1000,
            paused=fields["paused"] == "1",
            history_max=int(fields["history_max"]),
        )

    def replace(self, **changes) -> "TopicConfig":
        unknown = set(changes) - set(asdict(self))
        if unknown:
            raise InvalidArgument(f"unknown topic option(s): {', '.join(sorted(unknown))}; "
                                  f"known: {', '.join(sorted(asdict(self)))}")
        return TopicConfig(**{**{f: getattr(self, f) for f in self.__slots__}, **changes})
