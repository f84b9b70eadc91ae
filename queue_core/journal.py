"""A message's journal: the progress and log lines its handler reports while it runs
(``message.progress(0.42, "step 3/7")``, ``message.log("...")``), kept per group beside the
message's history and deleted with it.

Writing costs nothing until a handler calls one of them: the lines wait in a small buffer on
the message (``JournalBuffer``) and the worker's keeper sends what is buffered with one script
call per partition at its next tick (at most every 0.5 s while it holds messages), and before a
failed message's nack, so the last lines before an error stay with the dead letter. An acked
message's journal goes with it, so a handler that finishes is never waited for.

Stored (lua/report.lua, lua/includes/journal.lua) in the group's ``journal`` hash: the log in
chunks of up to 4 KiB (``<id>|<k>``: lines ``"<ms>|<attempt>|<text>"`` joined by newlines; a
line's own newlines are stored as U+2424), ``<id>|n`` which chunks are kept and their sizes,
``<id>|p`` the latest progress ``"<fraction>|<ms>|<attempt>|<note>"``. The oldest chunk goes once
the newer ones hold the last ``MAX_LINES`` lines or ``MAX_BYTES`` bytes, and readers show exactly
those (so at most one chunk more is stored). Times are the worker's clock when the handler made
the call (the order of its own lines), not Redis's.
"""

import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from .errors import InvalidArgument

MAX_LINES = 100            # log lines kept per message and group
MAX_BYTES = 64 * 1024      # bytes of log kept per message and group
MAX_LINE = 2048            # characters of one line (longer ones are cut, with a mark)
MAX_NOTE = 200             # characters of a progress note
REPORT_LINES = 500         # lines one report script call writes at most, and
REPORT_MOST = 50           # messages: each call stays within ~2-3 ms (~45 us a message at the cap)
PROGRESS_SUFFIX = "|p"     # the progress field of a message: "<id>|p" (no message id contains '|')
META_SUFFIX = "|n"         # "<id>|n": which chunks are kept
NEWLINE = "\u2424"         # a line's own newlines, as stored (a stored newline ends a line)


def _ms_to_dt(ms: int) -> datetime | None:
    from .message import ms_to_dt
    return ms_to_dt(ms)


class JournalBuffer:
    """What a handler reported and the worker has not sent yet. Thread-safe without a lock: the
    handler appends, the keeper pops (deque operations are atomic)."""

    __slots__ = ("lines", "progress")

    def __init__(self):
        # Bounded: a handler logging in a tight loop between two keeper ticks keeps only what a
        # report would send anyway (the newest MAX_LINES lines, the latest progress).
        self.lines: deque[str] = deque(maxlen=MAX_LINES)
        self.progress: deque[str] = deque(maxlen=1)

    def __bool__(self) -> bool:
        return bool(self.lines) or bool(self.progress)

    def take(self) -> tuple[str, list[str]]:
        """(the latest progress or '', the buffered lines, the oldest beyond the caps dropped),
        emptying the buffer."""
        progress = ""
        while True:
            try:
                progress = self.progress.popleft()
            except IndexError:
                break
        lines: list[str] = []
        while True:
            try:
                lines.append(self.lines.popleft())
            except IndexError:
                break
        return progress, cap_lines(lines)


def cap_lines(lines: list[str]) -> list[str]:
    """The newest lines within MAX_LINES and MAX_BYTES: what a buffer sends and readers show
    (report.lua keeps at least that much, and at most one 4 KiB chunk more)."""
    lines = lines[-MAX_LINES:]
    size = sum(len(s.encode()) for s in lines)
    start = 0
    while size > MAX_BYTES and start < len(lines):
        size -= len(lines[start].encode())
        start += 1
    return lines[start:]


def progress_value(fraction: float, note: str, attempt: int) -> str:
    """A progress call as stored; InvalidArgument unless 0 <= fraction <= 1."""
    try:
        value = float(fraction)
    except (TypeError, ValueError):
        raise InvalidArgument(f"progress takes a fraction between 0 and 1 (got {fraction!r})") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument(f"progress takes a fraction between 0 and 1 (got {fraction!r}); 0.42 is 42 %")
    note = _encodable(str(note)[:MAX_NOTE].replace("\n", " "))
    return f"{value:.4g}|{int(time.time() * 1000)}|{attempt}|{note}"


def _encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate (a JSON "\\udcff" in a payload, say) is
    written as its escape instead of failing the report that sends it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def log_line(text: str, attempt: int) -> str:
    """A log call as stored: one line, cut at MAX_LINE characters."""
    text = _encodable(str(text))
    if len(text) > MAX_LINE:
        text = text[:MAX_LINE] + f"… [{len(text) - MAX_LINE:,} characters cut]"
    return f"{int(time.time() * 1000)}|{attempt}|{text.replace(chr(13) + chr(10), NEWLINE).replace(chr(10), NEWLINE)}"


@dataclass(frozen=True, slots=True)
class LogLine:
    at: datetime | None
    attempt: int
    text: str


@dataclass(frozen=True, slots=True)
class Journal:
    """What a message's handlers reported in one group: the latest progress (None if none) and
    the last log lines, oldest first."""

    progress: float | None
    note: str
    progress_at: datetime | None
    progress_attempt: int
    lines: tuple[LogLine, ...]

    @classmethod
    def parse(cls, progress: bytes | str | None, chunks: list) -> "Journal":
        """From the stored progress and log chunks (any may be missing): the last MAX_LINES
        lines within MAX_BYTES. Unreadable parts are shown as they are."""
        fraction, note, at, att = None, "", None, 0
        if progress:
            text = progress.decode("utf-8", "replace") if isinstance(progress, bytes) else progress
            parts = text.split("|", 3)
            try:
                fraction, at, att, note = float(parts[0]), _ms_to_dt(int(parts[1])), int(parts[2]), parts[3]
            except (ValueError, IndexError, OverflowError, TypeError, OSError):
                fraction = None
            if fraction is not None and not 0.0 <= fraction <= 1.0:   # nan, inf or out of range: unreadable
                fraction = None
        stored = [line for chunk in chunks or () if chunk is not None   # None: dropped between the two reads
                  for line in (chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk).split("\n")]
        stored = cap_lines(stored)
        lines = []
        for raw in stored:
            parts = raw.split("|", 2)
            try:
                lines.append(LogLine(_ms_to_dt(int(parts[0])), int(parts[1]), parts[2].replace(NEWLINE, "\n")))
            except (ValueError, IndexError, OverflowError, TypeError, OSError):
                lines.append(LogLine(None, 0, raw[:MAX_LINE]))
        return cls(fraction, note, at, att, tuple(lines))

    @staticmethod
    def chunk_fields(msg_id: str, meta: bytes | str | None) -> list[str]:
        """The fields of the log chunks kept for ``msg_id``, from its ``<id>|n`` value."""
        if not meta:
            return []
        text = meta.decode() if isinstance(meta, bytes) else meta
        try:
            first, nxt = (int(v) for v in text.split("|")[:2])
        except ValueError:
            return []
        return [f"{msg_id}|{k}" for k in range(first, nxt)]

    @property
    def empty(self) -> bool:
        return self.progress is None and not self.lines
