"""What the engine hands out: Message (a snapshot of one message), Delivery (a claimed message
with its lease token) and Reject (raise it in a handler to dead-letter at once)."""

import json
import json.scanner
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .errors import Cancelled
from .journal import JournalBuffer, log_line, progress_value
from .keys import HELD_BASE, WAITING_SCORE
from .states import MessageState

_UNACKED = MessageState.unacked


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


def split_record(raw: bytes | None) -> tuple[list, bytes] | None:
    """A stored record ("created|max|ttl|keylen|okeylen|hdrlen|" key okey headers payload) as
    (header parts, payload), or None when it is missing or not one of ours. The same format
    publish.lua writes and parse_header() in lua/includes/record.lua reads. Lengths count bytes.
    The header is decoded only when asked for (header_fields): a handler reading the payload
    never pays for it."""
    if not raw:
        return None
    if isinstance(raw, str):
        raw = raw.encode()
    parts = raw.split(b"|", 6)
    if len(parts) != 7:
        return None
    try:
        end = int(parts[3]) + int(parts[4]) + int(parts[5])
    except ValueError:
        return None
    return parts, parts[6][end:]


def header_fields(parts: list) -> dict:
    """The header parts of split_record as {c, max, ttl, key, okey, hdr}."""
    c, mx, ttl, kl, okl, hl, rest = parts
    kl, okl, hl = int(kl), int(okl), int(hl)
    return {"c": int(c), "max": int(mx) if mx else None, "ttl": int(ttl) if ttl else None,
            "key": rest[:kl].decode("utf-8", "replace"), "okey": rest[kl:kl + okl].decode("utf-8", "replace"),
            "hdr": rest[kl + okl:kl + okl + hl].decode("utf-8", "replace")}


def _header_numbers_ok(parts: list) -> bool:
    """Whether header_fields() would read these split_record parts (the lengths were read by
    split_record already)."""
    try:
        int(parts[0])
        if parts[1]:
            int(parts[1])
        if parts[2]:
            int(parts[2])
    except ValueError:
        return False
    return True


def parse_lease(raw: bytes | str | None) -> tuple[str, int, int, int, str, str] | None:
    """A lease ("token|attempt|claim ms|due ms|ordering key", then "\\1cause" when the delivery
    was late: includes/lateness.lua) as (token, attempt, claim ms, due ms, okey, cause or "")."""
    if not raw:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    parts = text.split("|", 4)
    try:
        okey, _, cause = parts[4].partition("\x01")
        return parts[0], int(parts[1]), int(parts[2]), int(parts[3]), okey, cause
    except (ValueError, IndexError):
        return None


# json's own scanner (C where CPython has it), configured as json.loads's: the decoder
# json.loads(bytes) ends in, without the Python layers around it.
_SCAN_JSON = json.scanner.make_scanner(json.JSONDecoder())


def decode_json(payload: bytes) -> Any:
    """json.loads(payload): the same value, or the same exception. A payload json.loads would
    read as UTF-8 (no zero byte among its first two, no byte order mark: what every publish
    writes) that holds one JSON value, without whitespace around it, is decoded by json's scanner
    directly, ~1.1 us for a small object against json.loads's ~2.3 (its encoding detection,
    three Python calls, two regular expressions: a tenth of a worker's own time a message); any
    other payload, and every error, takes json.loads itself."""
    if type(payload) is bytes and len(payload) > 1 and 0 < payload[0] < 0xEF and payload[1]:
        text = payload.decode("utf-8", "surrogatepass")   # what json.loads decodes it with
        try:
            value, end = _SCAN_JSON(text, 0)
        except StopIteration:   # no value where it starts (whitespace, or none): json.loads's way
            return json.loads(payload)
        if end == len(text):   # else whitespace or more after it: json.loads's way
            return value
    return json.loads(payload)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Message:
    """A snapshot of one message as one consumer group sees it. ``payload`` is bytes; ``text()``
    and ``json()`` decode it.

    The record is parsed on first access: a worker handing messages to handlers that only read the
    payload never pays for it.

    ``corrupt`` is a reason when the engine found this message's data unreadable in Redis; such a
    message sits in ``dead`` and can be inspected and deleted, never delivered.
    """

    __slots__ = ("id", "topic", "_payload", "state", "group", "partition", "_score", "_traceback", "_record",
                 "_header", "_info_raw", "_att_raw", "_lease_raw", "_holder", "_parsed", "_corrupt", "_due_ms",
                 "_dispatch", "_cancel", "_journal", "waiting_for", "waiting_delay")

    def __init__(self, id: str, topic: str, payload: bytes | None = None, state: MessageState | None = None, *,
                 group: str = "default", partition: int = 0, record: bytes | None = None,
                 info: bytes | str | dict | None = None, attempts: bytes | str | int | None = None,
                 lease: bytes | str | None = None, score: float | None = None, traceback: str = "",
                 holder: str | None = None, corrupt: str | None = None, due_ms: int | None = None,
                 dispatch: bytes | str | None = None):
        """``record`` is the stored header and payload in one value (split on first access);
        without it, ``payload`` is given directly."""
        self.id = id
        self.topic = topic
        self._payload = payload
        self._record = record
        self._header: dict | None = None
        self.state = state
        self.group = group
        self.partition = partition
        self._score = score
        self._traceback = traceback
        self._info_raw = info
        self._att_raw = attempts
        self._lease_raw = lease
        self._holder = holder or None
        self._parsed: tuple[dict, dict, int, tuple | None] | None = None
        self._corrupt = corrupt
        self._due_ms = due_ms
        self._dispatch = _text(dispatch) if dispatch else None   # "<priority>|<fairness key>" (dispatch.lua)
        self._cancel = None    # set by the worker when an operator cancelled the delivery in progress
        self._journal = None   # progress and log lines a handler wrote, not yet sent (queue_core.journal)
        # The id of the message whose ack in this group releases this one (publish(after=)), and
        # the seconds after that ack it will be due; set by ``get``, None otherwise.
        self.waiting_for: str | None = None
        self.waiting_delay: float | None = None

    @classmethod
    def claimed(cls, id: str, topic: str, group: str, partition: int, record: bytes, info: bytes | None,
                attempts: int, score: int, due_ms: int) -> "Message":
        """What Message(id, topic, None, unacked, group=..., partition=..., record=..., info=...,
        attempts=..., score=..., due_ms=...) makes, for each message of a claim: the slots set
        directly cost a third of the keyword call (0.3 against 1.1 us a message).
        tests/queue_core/test_claim.py checks that both make the same message."""
        m = cls.__new__(cls)
        m.id, m.topic, m._payload, m.state, m.group, m.partition = id, topic, None, _UNACKED, group, partition
        m._score, m._traceback, m._record, m._header, m._info_raw = score, "", record, None, info
        m._att_raw, m._lease_raw, m._holder, m._parsed, m._corrupt, m._due_ms = attempts, None, None, None, None, due_ms
        m._dispatch = m._cancel = m._journal = m.waiting_for = m.waiting_delay = None
        return m

    @property
    def priority(self) -> int | None:
        """0-9 (higher is claimed first among due messages); None on a claimed message, where the
        claim does not say it."""
        if self._dispatch:
            return int(self._dispatch.partition("|")[0])
        return None if self._due_ms is not None else 0

    @property
    def fairness_key(self) -> str | None:
        """The fairness key it was published with, or None (none, or a claimed message)."""
        return self._dispatch.partition("|")[2] or None if self._dispatch else None

    # -- parsing -------------------------------------------------------------------------------

    def _split(self) -> None:
        split = split_record(self._record) if self._record is not None else None
        if split is None:
            if self._record is not None or self._payload is None:
                shown = _text(self._record)[:200] if self._record else "missing"
                self._corrupt = self._corrupt or f"message record unreadable ({shown!r})"
            self._header = {"c": None, "max": None, "ttl": None, "key": "", "okey": "", "hdr": ""}
            if self._payload is None:
                self._payload = b""
        else:
            self._header, self._payload = split   # header parts, decoded by _p() when needed

    @property
    def payload(self) -> bytes:
        if self._payload is None or self._header is None and self._record is not None:
            self._split()
        return self._payload

    @property
    def record_size(self) -> int:
        """Bytes this message takes in memory as fetched (header and payload), without parsing."""
        raw = self._record if self._record is not None else self._payload
        return len(raw) if raw else 0

    def _p(self) -> tuple[dict, dict, int, tuple | None]:
        if self._parsed is None:
            if self._header is None:
                self._split()
            if isinstance(self._header, list):
                try:
                    self._header = header_fields(self._header)
                except ValueError:
                    self._corrupt = self._corrupt or "message header unreadable"
                    self._header = {"c": None, "max": None, "ttl": None, "key": "", "okey": "", "hdr": ""}
            header = self._header
            raw = self._info_raw
            info: dict = {"rc": 0, "h": []}
            if isinstance(raw, dict):
                info = raw
            elif raw:
                try:
                    info = json.loads(raw)
                    if not isinstance(info, dict) or not isinstance(info.get("h", []), list):
                        raise ValueError("not a delayq delivery record")
                except ValueError as exc:
                    self._corrupt = self._corrupt or f"unreadable delivery record ({exc}): {_text(raw)[:200]!r}"
                    info = {"rc": 0, "h": []}
            lease = parse_lease(self._lease_raw)
            try:
                att = int(self._att_raw) if self._att_raw not in (None, b"", "") else 0
            except ValueError:
                att = 0
            if lease is not None and self.state is MessageState.unacked:
                att = lease[1]
            self._parsed = (header, info, att, lease)
        return self._parsed

    @property
    def corrupt(self) -> str | None:
        if self._parsed is None and not self._info_raw:
            # A first delivery (no delivery record): only its record can be unreadable, and the
            # header's numbers say so without decoding the header's text (every message a worker
            # takes asks this first; most handlers then read only the payload).
            if self._header is None:
                self._split()
            if not isinstance(self._header, list) or _header_numbers_ok(self._header):
                return self._corrupt
        info = self._p()[1]
        return info.get("corrupt") or self._corrupt   # the engine's own finding first

    @property
    def attempts(self) -> int:
        """Deliveries so far (the one in progress included while unacked)."""
        return self._p()[2]

    @property
    def max_attempts(self) -> int | None:
        """The message's own limit, or None when the group's policy decides."""
        return self._p()[0]["max"]

    @property
    def headers(self) -> dict[str, Any]:
        hdr = self._p()[0]["hdr"]
        try:
            value = json.loads(hdr) if hdr else {}
            return value if isinstance(value, dict) else {}
        except ValueError:
            return {}

    @property
    def held(self) -> bool:
        """Pending behind another message of its ordering key (ordered groups); a message waiting for
        its parent (after=) is not held but waiting (``waiting_for``)."""
        return (self.state is MessageState.pending and self._score is not None
                and HELD_BASE <= self._score < WAITING_SCORE)

    @property
    def held_by(self) -> str | None:
        """The id of the message that holds this one's ordering key in this group, if another. Set
        by ``get``, and for held messages by ``page``, ``peek`` and ``search`` (read in their script call)."""
        return self._holder if self._holder and self._holder != self.id else None

    @property
    def key_holder(self) -> str | None:
        """The id of the message holding this one's ordering key in this group (itself included);
        None when no message holds it or the message has no ordering key. Set by ``get``."""
        return self._holder

    @property
    def lateness_cause(self) -> str | None:
        """Why the delivery in progress was claimed more than 10 ms after its due time, as the claim
        decided it (one of LATENESS_CAUSES; a retry claimed on time says ``retry_backoff``); None
        when it was on time or the message is not unacked. ``late_behind`` names the holder for
        ``key_held``."""
        lease = self._p()[3] if self.state is MessageState.unacked else None
        return lease[5].partition(":")[0] or None if lease else None

    @property
    def late_ms(self) -> int | None:
        """How long after its due time the delivery in progress was claimed (unacked only)."""
        lease = self._p()[3] if self.state is MessageState.unacked else None
        return lease[2] - lease[3] if lease else None

    @property
    def late_behind(self) -> str | None:
        """For ``lateness_cause == "key_held"``: the id of the message whose ordering key held this
        one past its due time."""
        lease = self._p()[3] if self.state is MessageState.unacked else None
        return lease[5].partition(":")[2] or None if lease else None

    @property
    def due_at(self) -> datetime | None:
        if self.state in (MessageState.pending, MessageState.ready, MessageState.retrying) \
                and self._score is not None and self._score < HELD_BASE:   # held or waiting: no due time
            return ms_to_dt(self._score)
        if self.state is MessageState.unacked:
            lease = self._p()[3]
            return ms_to_dt(self._due_ms if self._due_ms is not None else lease[3] if lease else None)
        return None

    @property
    def created_at(self) -> datetime | None:
        return ms_to_dt(self._p()[0]["c"])

    @property
    def key(self) -> str | None:
        return self._p()[0]["key"] or None

    @property
    def order_key(self) -> str | None:
        return self._p()[0]["okey"] or None

    @property
    def ttl(self) -> float | None:
        """The message's own time to live in seconds (None: the group's default applies)."""
        ttl = self._p()[0]["ttl"]
        return ttl / 1000 if ttl else None

    @property
    def replay_count(self) -> int:
        return int(self._p()[1].get("rc", 0) or 0)

    @property
    def score(self) -> float | None:
        """Its position in its state, in epoch ms: due time, lease deadline or time of death (a
        held message's is beyond any time). None when read outside a state."""
        return self._score

    @property
    def lease_deadline(self) -> datetime | None:
        """When the lease of an unacked message runs out (None in other states)."""
        return ms_to_dt(self._score) if self.state is MessageState.unacked else None

    @property
    def dead_at(self) -> datetime | None:
        return ms_to_dt(self._p()[1].get("da")) if self.state is MessageState.dead else None

    @property
    def last_error(self) -> ErrorInfo | None:
        err = self._p()[1].get("err")
        if not isinstance(err, dict):
            return None
        return ErrorInfo(str(err.get("t", "")), str(err.get("m", "")), str(err.get("fp", "")), self._traceback)

    @property
    def history(self) -> tuple[HistoryEntry, ...]:
        """What happened to the message in this group: published, then failures and operator
        actions with the claims that led to them, then the claim in progress."""
        header, info, _att, lease = self._p()
        out = []
        if header["c"] is not None:
            out.append(HistoryEntry(ms_to_dt(header["c"]), "published", 0, "", ""))
        for h in info.get("h", []):
            try:
                out.append(HistoryEntry(ms_to_dt(h[0]), str(h[1]), int(h[2]), str(h[3]), str(h[4])))
            except (TypeError, ValueError, IndexError):
                out.append(HistoryEntry(None, "unreadable", 0, repr(h)[:200], ""))
        if lease is not None and self.state is MessageState.unacked:
            out.append(HistoryEntry(ms_to_dt(lease[2]), "claimed", lease[1], "", ""))
        return tuple(out)

    # -- while a handler runs it -----------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the worker learnt that an operator cancelled this delivery
        (``cancel(..., running=True)``): at the worker's next lease extension, within a second.
        The lease is gone; nothing the handler does now can ack it."""
        return self._cancel is not None

    def check_cancelled(self) -> None:
        """Raise ``Cancelled`` if the delivery was cancelled: call it between steps of long work
        (the asyncio worker also cancels the handler's task)."""
        if self._cancel is not None:
            raise Cancelled(f"message {self.id} of topic {self.topic!r} was cancelled while its handler ran "
                            "(see its history for who cancelled it); stop working on it")

    def progress(self, fraction: float, note: str = "") -> None:
        """Report how far the handler is (0 to 1) with an optional note ("step 3/7"): shown on
        the message's page and in the API within about a second (queue_core.journal). Costs no
        Redis call here: the worker sends the latest with its next lease round."""
        if self._journal is None:
            self._journal = JournalBuffer()
        self._journal.progress.append(progress_value(fraction, note, self.attempts))

    def log(self, text: str) -> None:
        """Add a line to the message's log (the last 100 lines / 64 KiB are kept with its
        history; one line per call, cut at 2,048 characters). Buffered like ``progress``."""
        if self._journal is None:
            self._journal = JournalBuffer()
        self._journal.lines.append(log_line(text, self.attempts))

    # -- payload -------------------------------------------------------------------------------

    def text(self, encoding: str = "utf-8") -> str:
        return self.payload.decode(encoding)

    def json(self) -> Any:
        """The payload decoded as json.loads decodes it: the same value, or the same error."""
        return decode_json(self.payload)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.topic, self.group, self.id, self.state, self.payload, self._p()) == \
               (other.topic, other.group, other.id, other.state, other.payload, other._p())

    __hash__ = None  # mutable cache inside; compare by value only

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, group={self.group!r}, id={self.id!r}, state={self.state}, " \
               f"attempts={self.attempts}, payload={self.payload[:60]!r}{'…' if len(self.payload) > 60 else ''})"


@dataclass(slots=True, eq=False)
class Delivery:
    """A claimed message. Present it to ack/nack/extend/reject: the token fences stale workers.

    Not frozen: a frozen dataclass sets each field through object.__setattr__, which a worker
    would pay for every message. Treat it as read-only."""

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
    def group(self) -> str:
        return self.message.group

    @property
    def partition(self) -> int:
        return self.message.partition

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def lateness_ms(self) -> int:
        """How long after its due time the message was claimed."""
        return self.claimed_ms - self.due_ms
