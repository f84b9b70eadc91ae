"""What the engine hands out: Message (a snapshot of one message), Delivery (a claimed message
with its lease token) and Reject (raise it in a handler to dead-letter at once)."""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .states import MessageState


def ms_to_dt(ms: float | int | None) -> datetime | None:
    if ms is None or ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class Reject(Exception):  # noqa: N818 - the name is the public contract: `raise Reject(...)`
    """Raise in a handler to dead-letter the message now, without retries."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    type: str
    message: str
    fingerprint: str
    traceback: str = ""

    def summary(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: datetime
    event: str
    attempt: int
    detail: str
    actor: str


class Message:
    """A snapshot of one message. ``payload`` is bytes; ``text()`` and ``json()`` decode it.

    Metadata (attempts, history, errors, times) is parsed on first access: a worker handing
    messages to handlers that only read the payload never pays for it.

    ``corrupt`` is a reason when the engine found this message's data unreadable in Redis; such a
    message sits in ``dead`` and can be inspected and deleted, never delivered.
    """

    __slots__ = ("id", "topic", "payload", "state", "_raw", "_score", "_traceback", "_meta", "_corrupt")

    def __init__(self, id: str, topic: str, payload: bytes, state: MessageState | None = None, *,
                 meta: bytes | str | dict | None = None, score: float | None = None, traceback: str = "",
                 corrupt: str | None = None):
        self.id = id
        self.topic = topic
        self.payload = payload
        self.state = state
        self._raw = meta if meta is not None else {"att": 0, "h": []}
        self._score = score
        self._traceback = traceback
        self._meta: dict | None = None
        self._corrupt = corrupt

    @classmethod
    def from_redis(cls, topic: str, msg_id: str, meta_raw: bytes | str, payload: bytes | None,
                   state: MessageState | None = None, score: float | None = None,
                   traceback: str = "") -> "Message":
        """Build from the stored JSON metadata. Never raises: unreadable data shows as ``corrupt``."""
        corrupt = "payload missing" if payload is None else None
        return cls(msg_id, topic, payload or b"", state, meta=meta_raw, score=score, traceback=traceback,
                   corrupt=corrupt)

    # -- parsing -------------------------------------------------------------------------------

    def _m(self) -> dict:
        if self._meta is None:
            raw = self._raw
            try:
                meta = raw if isinstance(raw, dict) else json.loads(raw)
                if not isinstance(meta, dict) or not isinstance(meta.get("att"), int | float) \
                        or not isinstance(meta.get("h", []), list):
                    raise ValueError("metadata is not a delayq record")
            except ValueError as exc:
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                self._corrupt = self._corrupt or f"unreadable metadata ({exc}): {text[:200]!r}"
                meta = {"att": 0, "h": []}
            self._meta = meta
        return self._meta

    @property
    def corrupt(self) -> str | None:
        meta = self._m()
        return self._corrupt or meta.get("corrupt")

    @property
    def attempts(self) -> int:
        return int(self._m()["att"])

    @property
    def max_attempts(self) -> int | None:
        """The message's own limit, or None when the topic's policy decides."""
        return self._m().get("max")

    @property
    def headers(self) -> dict[str, Any]:
        hdr = self._m().get("hdr")
        try:
            return json.loads(hdr) if hdr else {}
        except ValueError:
            return {}

    @property
    def due_at(self) -> datetime | None:
        if self.state in (MessageState.pending, MessageState.ready, MessageState.retrying) \
                and self._score is not None:
            return ms_to_dt(self._score)
        return ms_to_dt(self._m().get("due"))

    @property
    def created_at(self) -> datetime | None:
        return ms_to_dt(self._m().get("c"))

    @property
    def key(self) -> str | None:
        return self._m().get("key")

    @property
    def replay_count(self) -> int:
        return int(self._m().get("rc", 0))

    @property
    def lease_deadline(self) -> datetime | None:
        """When the lease of an unacked message runs out (None in other states)."""
        return ms_to_dt(self._score) if self.state is MessageState.unacked else None

    @property
    def dead_at(self) -> datetime | None:
        return ms_to_dt(self._m().get("da"))

    @property
    def last_error(self) -> ErrorInfo | None:
        err = self._m().get("err")
        if not isinstance(err, dict):
            return None
        return ErrorInfo(str(err.get("t", "")), str(err.get("m", "")), str(err.get("fp", "")), self._traceback)

    @property
    def history(self) -> tuple[HistoryEntry, ...]:
        out = []
        for h in self._m().get("h", []):
            try:
                out.append(HistoryEntry(ms_to_dt(h[0]), str(h[1]), int(h[2]), str(h[3]), str(h[4])))
            except (TypeError, ValueError, IndexError):
                out.append(HistoryEntry(None, "unreadable", 0, repr(h)[:200], ""))
        return tuple(out)

    # -- payload -------------------------------------------------------------------------------

    def text(self, encoding: str = "utf-8") -> str:
        return self.payload.decode(encoding)

    def json(self) -> Any:
        return json.loads(self.payload)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.topic, self.id, self.state, self.payload, self._m()) == \
               (other.topic, other.id, other.state, other.payload, other._m())

    __hash__ = None  # mutable cache inside; compare by value only

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, id={self.id!r}, state={self.state}, attempts={self.attempts}, " \
               f"payload={self.payload[:60]!r}{'…' if len(self.payload) > 60 else ''})"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed message. Present it to ack/nack/extend/reject: the token fences stale workers."""

    message: Message
    token: str
    attempt: int
    due_ms: int            # when it became due (Redis clock, ms)
    claimed_ms: int        # when it was claimed (Redis clock, ms)
    lease_deadline_ms: int

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def lateness_ms(self) -> int:
        """How long after its due time the message was claimed."""
        return self.claimed_ms - self.due_ms
