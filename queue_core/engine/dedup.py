"""Dedup windows (``publish(..., key=, dedup=, window=)``; lua/includes/dedup.lua and debounce.lua)
and what a publish answers: ``PublishResult``."""

import math
from datetime import timedelta

from ..errors import InvalidArgument
from .base import as_seconds

# What a publish with a key did; the script answers with these words (lua/publish.lua).
PUBLISHED = "published"     # a new message (it holds the key now)
DUPLICATE = "duplicate"     # the key is held (its message exists, or its window is open): that id
THROTTLED = "throttled"     # the same, for dedup="throttle": this publish was dropped
DEBOUNCED = "debounced"     # the key's message had not started: it took this payload and due time
OUTCOMES = (PUBLISHED, DUPLICATE, THROTTLED, DEBOUNCED)
MAX_WINDOW_S = 10 * 366 * 86400   # ten years: a window held "forever" is a key never freed

# dedup= modes: whether each takes a window, and what the window counts from.
DEDUP_MODES = {
    "unique_for": "the key stays held `window` seconds after its message is done",
    "throttle": "the key stays held `window` seconds from the accepted publish",
    "debounce": "a publish replaces the payload and due time of the key's message until one group starts it",
}


class PublishResult(str):
    """The id ``publish()`` returns: a ``str`` (every caller that used the id as a string keeps
    working), which also says what happened in ``outcome``: ``published``, ``duplicate`` (the key
    was held; this is the id holding it), ``throttled`` (the same, for ``dedup="throttle"``: this
    publish was dropped) or ``debounced`` (the key's pending message took this payload and due
    time)."""

    outcome: str

    def __new__(cls, msg_id: str, outcome: str = PUBLISHED):
        self = super().__new__(cls, msg_id)
        self.outcome = outcome
        return self

    def __getnewargs__(self):
        return (str(self), self.outcome)

    @property
    def id(self) -> str:
        return str(self)

    @property
    def created(self) -> bool:
        """True when this publish stored a new message."""
        return self.outcome == PUBLISHED

    def __repr__(self) -> str:
        return f"PublishResult({str(self)!r}, {self.outcome!r})"


def key_rule(key: str | None, strict: bool, dedup: str | None, window: float | timedelta | None) -> str:
    """publish.lua's ARGV[5] for these options: '0' / '1' (strict), or '<0|1>|<mode>|<window ms>'.
    Refuses combinations that mean nothing, saying what to pass instead."""
    flag = "1" if strict else "0"
    if dedup is None:
        if window is not None:
            raise InvalidArgument("window= needs dedup='unique_for' or dedup='throttle' (and a key=)")
        return flag
    if dedup not in DEDUP_MODES:
        raise InvalidArgument(f"dedup must be one of {', '.join(DEDUP_MODES)} (or None), not {dedup!r}")
    if key is None:
        raise InvalidArgument(f"dedup={dedup!r} needs a key= (the key is what is deduplicated)")
    if dedup == "debounce":
        if window is not None:
            raise InvalidArgument("dedup='debounce' takes no window: the due time is delay= from each publish")
        if strict:
            raise InvalidArgument("dedup='debounce' never refuses a publish; drop strict=True")
        return f"{flag}|debounce|0"
    if window is None:
        raise InvalidArgument(f"dedup={dedup!r} needs window= (seconds: {DEDUP_MODES[dedup]})")
    try:
        seconds = as_seconds(window, "window")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"window must be a number of seconds (got {window!r})") from exc
    if not math.isfinite(seconds) or seconds > MAX_WINDOW_S:
        raise InvalidArgument(f"window must be at most {MAX_WINDOW_S // 86400:,} days (got {window!r})")
    ms = int(seconds * 1000)
    if ms <= 0:
        raise InvalidArgument(f"window must be positive (got {window!r})")
    return f"{flag}|{dedup}|{ms}"
