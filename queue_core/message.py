"""What the engine hands out: Message (a snapshot of one message), Delivery (a claimed message
with its lease token) and Reject (raise it in a handler to dead-letter at once)."""

import json
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class Message:
    """A snapshot of one message. ``payload`` is bytes; ``text()`` and ``json()`` decode it.

    ``corrupt`` is a reason when the engine found this message's data unreadable in Redis; such a
    message sits in ``dead`` and can be inspected and deleted, never delivered.
    """

    id: str
    topic: str
    payload: bytes
    state: MessageState | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    max_attempts: int | None = None   # None: the topic's policy decides
    due_at: datetime | None = None
    created_at: datetime | None = None
    key: str | None = None
    replay_count: int = 0
    last_error: ErrorInfo | None = None
    history: tuple[HistoryEntry, ...] = ()
    lease_deadline: datetime | None = None
    dead_at: datetime | None = None
    corrupt: str | None = None

    def text(self, encoding: str = "utf-8") -> str:
        return self.payload.decode(encoding)

    def json(self) -> Any:
        return json.loads(self.payload)

    @classmethod
    def from_redis(cls, topic: str, msg_id: str, meta_raw: bytes | str, payload: bytes | None,
                   state: MessageState | None = None, score: float | None = None,
                   traceback: str = "") -> "Message":
        """Build from the stored JSON metadata. Never raises: unreadable data becomes ``corrupt``."""
        try:
            meta = json.loads(meta_raw)
            if not isinstance(meta, dict) or not isinstance(meta.get("att"), int | float):
                raise ValueError("metadata is not a delayq record")
            err = meta.get("err")
            last_error = ErrorInfo(str(err.get("t", "")), str(err.get("m", "")), str(err.get("fp", "")),
                                   traceback) if isinstance(err, dict) else None
            history = tuple(HistoryEntry(ms_to_dt(h[0]), str(h[1]), int(h[2]), str(h[3]), str(h[4]))
                            for h in meta.get("h", []))
            headers = json.loads(meta["hdr"]) if meta.get("hdr") else {}
            due = meta.get("due")
            if state in (MessageState.pending, MessageState.ready, MessageState.retrying) and score is not None:
                due = score
            corrupt = meta.get("corrupt")
            if payload is None and not corrupt:
                corrupt = "payload missing"
            return cls(
                id=msg_id, topic=topic, payload=payload or b"", state=state, headers=headers,
                attempts=int(meta["att"]), max_attempts=meta.get("max"), due_at=ms_to_dt(due),
                created_at=ms_to_dt(meta.get("c")), key=meta.get("key"), replay_count=int(meta.get("rc", 0)),
                last_error=last_error, history=history, lease_deadline=ms_to_dt(meta.get("dl")),
                dead_at=ms_to_dt(meta.get("da")), corrupt=corrupt,
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raw = meta_raw.decode("utf-8", "replace") if isinstance(meta_raw, bytes) else str(meta_raw)
            return cls(id=msg_id, topic=topic, payload=payload or b"", state=state,
                       corrupt=f"unreadable metadata ({exc}): {raw[:200]!r}")


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
