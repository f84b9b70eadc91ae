"""The only place that formats Redis key strings.

Every key of a topic shares the hash tag ``{topic}`` so a script touching them all works on Redis
Cluster; every key a script touches is passed in KEYS. The schema version sits in the prefix.
"""

import re
from dataclasses import dataclass

from .errors import InvalidTopic
from .states import MessageState

SCHEMA_VERSION = "v1"
TOPIC_RULE = "1-128 characters: a letter or digit first, then letters, digits, '.', '_', ':' or '-'"
_TOPIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def validate_topic(topic: str) -> str:
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopic(f"invalid topic name {topic!r}: topic names are {TOPIC_RULE}")
    return topic


@dataclass(frozen=True, slots=True)
class TopicKeys:
    """All keys of one topic. Field order here is the KEYS order the scripts expect."""

    config: str      # HASH  engine configuration, written by configure_topic()
    pending: str     # ZSET  id -> due ms
    ready: str       # ZSET  id -> due ms (claimed lowest first)
    unacked: str     # ZSET  id -> lease deadline ms
    retrying: str    # ZSET  id -> next attempt ms
    dead: str        # ZSET  id -> death ms
    meta: str        # HASH  id -> JSON metadata (state, attempts, token, errors, history)
    payloads: str    # HASH  id -> payload bytes
    tracebacks: str  # HASH  id -> last traceback (<= 8 KiB)
    dedup: str       # HASH  key -> id, while the message exists
    fp_count: str    # HASH  fingerprint -> number of dead letters with it
    fp_info: str     # HASH  fingerprint -> JSON {type, message, first_seen, last_seen}
    fp_index: str    # ZSET  score 0, member "<fp>:<death ms, 15 digits>:<id>" (lex ranges per group)
    events: str      # STREAM every transition, for analytics and the archive
    stats: str       # HASH  lifetime counters (published, acked, ...) and the token sequence
    signal: str      # LIST  wake-up tokens for sleeping workers (bounded)
    workers: str     # ZSET  worker id -> last heartbeat ms
    leases: str      # HASH  id -> "token|attempt|claim ms|dedup key" while unacked (ack reads only this)
    minutes: str     # HASH  "<epoch minute>:<event>" -> count (published, acked, dead), last hour or so

    @classmethod
    def for_topic(cls, topic: str, prefix: str = "dq") -> "TopicKeys":
        validate_topic(topic)
        base = f"{prefix}:{SCHEMA_VERSION}:{{{topic}}}:"
        return cls(*(base + name for name in cls.__slots__))

    def state(self, state: MessageState) -> str:
        return getattr(self, state.value)

    def as_list(self) -> list[str]:
        return [getattr(self, name) for name in self.__slots__]


def topics_registry_key(prefix: str = "dq") -> str:
    """A SET of topic names. Outside any hash tag: written by plain commands, never by scripts."""
    return f"{prefix}:{SCHEMA_VERSION}:topics"


def archiver_lock_key(prefix: str = "dq") -> str:
    """A STRING held (with a TTL) by the one archiver run in progress; see pipeline.archiver."""
    return f"{prefix}:{SCHEMA_VERSION}:archiver:lock"
