"""Reading the JSON API's request bodies without trusting them. A body is read up to
DELAYQ_API_MAX_BODY_BYTES and checked by a scanner that never builds Python objects for a message's
payload: ``json.loads`` turns 4 MiB of ``[{},{},...]`` into ~110 MB of dicts (and recurses once per
nesting level), while here a payload stays a slice of the body, published as the JSON text it was
sent as. Only the small fields around it (delay, key, headers, ids...) are decoded, each after its
size was checked, so every malformed or oversized body is a BodyError (the API's 400 or 413), never a
RecursionError, an OverflowError or a MemoryError."""

import base64
import binascii
import json
import math
import re
from datetime import datetime

from .services.contracts import MAX_PRIORITY, InvalidArgument, check_fairness_key
from .services.publishing import MAX_AHEAD, due_time_problem

MAX_BATCH = 500
MAX_REPLAY = 500           # ids in one replay request
MAX_DEPTH = 128              # nesting levels of a payload: deeper JSON is refused, never recursed into
MAX_FIELD_BYTES = 16_384     # any field but the payload, as JSON text (headers, key, order_key, ids...)
MAX_KEY_CHARS = 1_024        # a dedup key (the engine refuses an ordering key past 256 itself)
PUBLISH_FIELDS = {"payload", "payload_base64", "delay", "at", "key", "order_key", "headers", "ttl", "partition",
                  "max_attempts", "fairness_key", "priority", "dedup", "window", "after", "group"}


class BodyError(ValueError):
    """What is wrong with a request body, said for its sender; ``status`` 400 or 413."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def read_body(request, limit: int) -> bytes:
    """The body, refused with 413 past ``limit`` bytes before more than limit + 1 are read (not
    request.body: that applies Django's own, unrelated limit, answered with an HTML 400)."""
    too_big = BodyError(f"the request body is larger than {limit:,} bytes (DELAYQ_API_MAX_BODY_BYTES): send fewer "
                        f"messages or ids per request, or store large blobs elsewhere and publish a reference", 413)
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise too_big
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise too_big
    try:
        raw.decode("utf-8")        # thrown away: only checks that the body is UTF-8
    except UnicodeDecodeError:
        raise BodyError("the body is not UTF-8 text: send JSON encoded as UTF-8") from None
    if (at := lone_surrogate(raw)) is not None:
        raise BodyError(f"the body has a lone UTF-16 surrogate escape ({raw[at:at + 6].decode()}) at byte {at:,}: "
                        "it stands for no character (a high one \\ud800-\\udbff must be followed by a low one "
                        "\\udc00-\\udfff)")
    return raw


# \uD800-\uDFFF escapes, with the run of backslashes before them: an even run is escaped backslashes
# followed by a plain "u", an odd one ends in the escape's own backslash.
_SURROGATE = re.compile(rb"(\\++)u([dD][0-9a-fA-F]{3})")
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def lone_surrogate(raw: bytes) -> int | None:
    """The byte offset of the first \\uD800-\\uDFFF escape that is not half of a pair, or None. Such a
    string decodes to a str no page can encode (a 500 on every view of the message) and stands for
    no character: refused where it enters, by a scan of the bytes (nothing decoded)."""
    paired = -1
    for m in _SURROGATE.finditer(raw):
        if len(m.group(1)) % 2 == 0:
            continue
        at = m.end(1) - 1                      # the escape's own backslash
        code = int(m.group(2), 16)
        if code < 0xD800:
            continue                           # \\ud000-\\ud7ff: ordinary characters
        if code <= 0xDBFF and _LOW.match(raw, m.end()):
            paired = m.end()                   # the low half that follows is part of this pair
            continue
        if code >= 0xDC00 and at == paired:
            continue
        return at
    return None


# One token of JSON after optional whitespace; the group that matched says which kind. Possessive
# repeats: a 4 MB string is one match without a backtracking stack.
_WS = rb"[ \t\n\r]*+"
_STR = rb'"(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+"'
_SCALAR = _STR + rb"|-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?|true|false|null"
_TOKEN = re.compile(_WS + rb"(?:([\[{])|([\]}])|(,)|(:)|(" + _STR + rb")|(" + _SCALAR + rb"))")
OPEN, CLOSE, COMMA, COLON, STRING, SCALAR = range(1, 7)
# A run of values nested at most RUN_LEVELS deep ("1, {}, [[2], 3], {"a": null}"), matched at
# once: dense JSON such as 4 MiB of "[[]],[[]],..." is then a few tokens, not a loop turn per
# bracket (seconds of CPU).
RUN_LEVELS = 3


def _flat(levels: int) -> bytes:
    if not levels:
        return rb"(?:" + _SCALAR + rb")"
    inner, sep = _flat(levels - 1), _WS + rb"," + _WS
    member = _STR + _WS + rb":" + _WS + inner
    return (rb"(?:" + _SCALAR + rb"|\[" + _WS + rb"(?:" + inner + rb"(?:" + sep + inner + rb")*+" + _WS + rb")?\]"
            + rb"|\{" + _WS + rb"(?:" + member + rb"(?:" + sep + member + rb")*+" + _WS + rb")?\})")


_RUN = re.compile(_WS + _flat(RUN_LEVELS) + rb"(?:" + _WS + rb"," + _WS + _flat(RUN_LEVELS) + rb")*+")
_SPACE = re.compile(_WS)


def _syntax_error(raw: bytes, pos: int) -> BodyError:
    at = _SPACE.match(raw, pos).end()
    if raw[at:at + 9].lstrip(b"-").startswith((b"Infinity", b"NaN")):
        return BodyError(f"Infinity and NaN are not JSON numbers (byte {at:,}): send a finite number")
    if at >= len(raw):
        return BodyError("the body is not JSON: it ends too early (an unclosed string, array or object)")
    return BodyError(f"the body is not JSON: unexpected {raw[at:at + 20].decode('utf-8', 'replace')!r} at byte {at:,}")


def value_end(raw: bytes, pos: int, *, max_depth: int = MAX_DEPTH) -> int:
    """Where the JSON value starting at ``pos`` (after whitespace) ends; BodyError if it is not
    one or nests deeper than ``max_depth``. A loop with an explicit stack: no recursion."""
    stack = bytearray()           # b"[" or b"{" per open container
    want = "value"                # value | value_or_close | key | key_or_close | colon | next
    while True:
        # (Near the depth limit the loop goes token by token, so the limit stays exact.)
        if want in ("value", "value_or_close") and stack and stack[-1] == ord("[") \
                and len(stack) + RUN_LEVELS <= max_depth and (run := _RUN.match(raw, pos)) is not None:
            pos, want = run.end(), "next"
            continue
        m = _TOKEN.match(raw, pos)
        if m is None:
            raise _syntax_error(raw, pos)
        kind, pos = m.lastindex, m.end()
        if want == "next":
            if kind == COMMA:
                want = "key" if stack[-1] == ord("{") else "value"
                continue
            if kind != CLOSE or raw[pos - 1] != (ord("]") if stack[-1] == ord("[") else ord("}")):
                raise _syntax_error(raw, m.start(kind))
            stack.pop()
        elif want == "colon":
            if kind != COLON:
                raise _syntax_error(raw, m.start(kind))
            want = "value"
            continue
        elif want == "key" or want == "key_or_close":
            if kind == STRING:
                want = "colon"
                continue
            if not (want == "key_or_close" and kind == CLOSE and raw[pos - 1] == ord("}")):
                raise _syntax_error(raw, m.start(kind))
            stack.pop()
        elif kind == OPEN:
            if len(stack) >= max_depth:
                raise BodyError(f"the JSON nests deeper than {max_depth} levels: flatten it")
            stack.append(raw[pos - 1])
            want = "key_or_close" if raw[pos - 1] == ord("{") else "value_or_close"
            continue
        elif kind in (STRING, SCALAR) or (kind == CLOSE and want == "value_or_close" and raw[pos - 1] == ord("]")):
            if kind == CLOSE:
                stack.pop()
        else:
            raise _syntax_error(raw, m.start(kind))
        if not stack:
            return pos
        want = "next"


def _walk(raw: bytes, pos: int, opener: bytes, what: str, most: int):
    """The members of the JSON object (``opener`` b"{") or the elements of the array (b"[") at
    ``pos``, as (name or None, start, end) of each value, and where the container ends. Each value
    is checked by value_end once; BodyError past ``most`` values (before reading on)."""
    m = _TOKEN.match(raw, pos)
    if m is None or m.lastindex != OPEN or raw[m.end() - 1] != opener[0]:
        raise BodyError(f"{what} must be a JSON {'object' if opener == b'{' else f'list of 1 to {most} items'}")
    closer = ord("}") if opener == b"{" else ord("]")
    pos, out = m.end(), []
    m = _TOKEN.match(raw, pos)
    if m is not None and m.lastindex == CLOSE and raw[m.end() - 1] == closer:
        return out, m.end()
    while True:
        name = None
        if opener == b"{":
            m = _TOKEN.match(raw, pos)
            if m is None or m.lastindex != STRING:
                raise _syntax_error(raw, pos)
            colon = _TOKEN.match(raw, m.end())
            if colon is None or colon.lastindex != COLON:
                raise _syntax_error(raw, m.end())
            name, pos = json.loads(m.group(STRING)), colon.end()
        start = _SPACE.match(raw, pos).end()
        pos = value_end(raw, start)
        out.append((name, start, pos))
        if len(out) > most:
            raise BodyError(f"{what} has more than {most} {'fields' if opener == b'{' else 'items'}")
        m = _TOKEN.match(raw, pos)
        if m is not None and m.lastindex == COMMA:
            pos = m.end()
        elif m is not None and m.lastindex == CLOSE and raw[m.end() - 1] == closer:
            return out, m.end()
        else:
            raise _syntax_error(raw, pos)


def _members(raw: bytes, pos: int, allowed: set[str], what: str) -> tuple[dict[str, tuple[int, int]], int]:
    """The members of the JSON object at ``pos`` as name -> (start, end) of its value, and the
    object's end; a name outside ``allowed`` is refused (the last of repeated names wins, as with
    json.loads)."""
    found, end = _walk(raw, pos, b"{", what, 4 * len(allowed))
    for name, _, _ in found:
        if name not in allowed:
            raise BodyError(f"unknown field {name[:100]!r} in {what}; known: {', '.join(sorted(allowed))}")
    return {name: (start, stop) for name, start, stop in found}, end


def _elements(raw: bytes, pos: int, most: int, what: str) -> list[tuple[int, int]]:
    """(start, end) of each element of the JSON array at ``pos``: 1 to ``most`` of them."""
    found, _ = _walk(raw, pos, b"[", what, most)
    if not found:
        raise BodyError(f"{what} must be a JSON list of 1 to {most} items")
    return [(start, stop) for _, start, stop in found]


def _end_of_body(raw: bytes, end: int) -> None:
    if raw[end:].strip(b" \t\n\r"):
        raise _syntax_error(raw, end)


def small_value(raw: bytes, span: tuple[int, int], name: str):
    """A field's decoded value, refused past MAX_FIELD_BYTES of JSON text before it is decoded."""
    start, end = span
    if end - start > MAX_FIELD_BYTES:
        raise BodyError(f"{name} is {end - start:,} bytes of JSON; at most {MAX_FIELD_BYTES:,}")
    try:
        return json.loads(raw[start:end])
    except ValueError as exc:     # e.g. an integer of more than 4,300 digits
        raise BodyError(f"{name} cannot be read: {exc}") from None


def replay_ids(raw: bytes, most: int) -> list[str]:
    """The ids of a replay body ``{"ids": [...]}``."""
    hint = f'send {{"ids": ["<message id>", ...]}} with 1 to {most} ids'
    try:
        members, end = _members(raw, 0, {"ids"}, "the body")
        _end_of_body(raw, end)
    except BodyError as exc:
        raise BodyError(f"{exc}: {hint}") from None
    if "ids" not in members:
        raise BodyError(hint)
    try:
        spans = _elements(raw, members["ids"][0], most, "ids")
    except BodyError as exc:
        raise BodyError(f"{exc}: {hint}") from None
    ids = [small_value(raw, span, "an id") for span in spans]
    if not all(isinstance(i, str) and i for i in ids):
        raise BodyError(f"each id must be a non-empty string: {hint}")
    return ids


class Message:
    """One message of a publish body: its fields still as spans of the body, decoded on use."""

    def __init__(self, raw: bytes, fields: dict[str, tuple[int, int]]):
        self.raw, self.fields = raw, fields

    def value(self, name: str):
        span = self.fields.get(name)
        return None if span is None else small_value(self.raw, span, name)

    def payload(self):
        """str for a JSON string (published as its UTF-8 text), bytes for payload_base64 (those
        bytes) and for any other JSON value (its JSON text, as sent)."""
        if ("payload" in self.fields) == ("payload_base64" in self.fields):
            raise BodyError("give exactly one of payload (any JSON value) and payload_base64 (bytes)")
        if "payload" in self.fields:
            start, end = self.fields["payload"]
            return json.loads(self.raw[start:end]) if self.raw[start] == ord('"') else self.raw[start:end]
        start, end = self.fields["payload_base64"]
        try:
            if self.raw[start] != ord('"'):
                raise TypeError
            return base64.b64decode(self.raw[start + 1:end - 1], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BodyError("payload_base64 is not valid base64 (a JSON string)") from None


def publish_messages(raw: bytes) -> tuple[bool, list["Message | BodyError"]]:
    """(single, messages) of a publish body: one message object, or ``{"messages": [...]}``. A
    batch's message that is not a valid object is its BodyError, reported for it alone."""
    members, end = _members(raw, 0, PUBLISH_FIELDS | {"messages"}, "the body")
    _end_of_body(raw, end)
    if "messages" not in members:
        return True, [Message(raw, members)]
    if len(members) > 1:
        raise BodyError('give one message\'s fields or "messages": [...], not both')
    spans = _elements(raw, members["messages"][0], MAX_BATCH, '"messages"')
    out = []
    for start, _end in spans:
        try:
            out.append(Message(raw, _members(raw, start, PUBLISH_FIELDS, "each message")[0]))
        except BodyError as exc:
            out.append(exc)                  # reported for this message alone, like its other errors
    return False, out


def _seconds(message: Message, field: str, *, low: float) -> float | None:
    value = message.value(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
        raise BodyError(f"{field} must be a number of seconds >= {low:g}, not {value!r}")
    if not math.isfinite(value) or value > MAX_AHEAD.total_seconds():
        raise BodyError(f"{field} must be at most {MAX_AHEAD.total_seconds():,.0f} seconds "
                        f"({MAX_AHEAD.days // 365:,} years), not {value!r}")
    return value


def _integer(message: Message, field: str, *, low: int, high: int) -> int | None:
    value = message.value(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BodyError(f"{field} must be an integer from {low} to {high:,}, not {value!r}")
    return value


def _text(message: Message, field: str, most: int):
    value = message.value(field)
    if value is not None and (not isinstance(value, str) or not value or len(value) > most):
        raise BodyError(f"{field} must be a non-empty string of at most {most:,} characters")
    return value


def _fairness_key(message: Message) -> str | None:
    """The engine's rule (1-256 bytes of UTF-8, no NUL), in the engine's words."""
    value = message.value("fairness_key")
    if value is None:
        return None
    if not isinstance(value, str):
        raise BodyError(f"fairness_key must be a string, not {type(value).__name__}")
    try:
        return check_fairness_key(value)
    except InvalidArgument as exc:
        raise BodyError(str(exc)) from None


def publish_arguments(message: Message) -> tuple[object, dict]:
    """(payload, keyword arguments of DelayQueue.publish) of one message; BodyError saying what
    is wrong."""
    if isinstance(message, BodyError):
        raise message
    payload = message.payload()
    kwargs = {"delay": _seconds(message, "delay", low=0) or 0, "ttl": _seconds(message, "ttl", low=0.001),
              "partition": _integer(message, "partition", low=0, high=1_000_000), "key": _text(message, "key", MAX_KEY_CHARS),
              "order_key": _text(message, "order_key", MAX_KEY_CHARS),
              "max_attempts": _integer(message, "max_attempts", low=1, high=1_000_000),
              "fairness_key": _fairness_key(message),
              # Higher is claimed first among due messages (GroupConfig's dispatch control).
              "priority": _integer(message, "priority", low=0, high=MAX_PRIORITY),
              # A dedup window (unique_for, throttle, debounce): the engine checks the combination.
              "dedup": _text(message, "dedup", 32), "window": _seconds(message, "window", low=0.001),
              # A chain: wait until `group` (default "default") acks the message `after` names.
              "after": _text(message, "after", 64), "group": _text(message, "group", 64)}
    if kwargs["group"] is not None and kwargs["after"] is None:
        raise BodyError("group names the group whose ack of the message `after` releases this one: give after too "
                        "(without after, a message goes to every group)")
    at_text = message.value("at")
    if at_text is not None:
        if message.value("delay") is not None:
            raise BodyError("give delay or at, not both")
        try:
            at = datetime.fromisoformat(at_text)
        except (TypeError, ValueError):
            raise BodyError(f"at must be an ISO 8601 time with an offset, not {at_text!r}") from None
        if at.tzinfo is None:
            raise BodyError("at needs an offset (e.g. 2026-11-23T18:00:00+00:00): a time without one is ambiguous")
        if (problem := due_time_problem(at)) is not None:
            raise BodyError(f"at {problem}")
        kwargs["at"] = at
    headers = message.value("headers")
    if headers is not None:
        if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise BodyError("headers must be an object of strings")
        kwargs["headers"] = headers
    return payload, {k: v for k, v in kwargs.items() if v is not None}

