"""A message's journal: the progress and log lines its handler reports while it runs
(``message.progress(0.42, "step 3/7")``, ``message.log("...")``), kept per group beside the
message's history and deleted with it.

Writing costs nothing until a handler calls one of them: the lines wait in a small buffer on
the message (``JournalBuffer``) and the worker's keeper sends what is buffered with one script
call per partition at its next tick (at most every 0.5 s while it holds messages), and before a
failed message's nack, so the last lines before an error stay with the dead letter. An acked
message's journal goes with it, so a handler that finishes is never waited for.

Stored (lua/report.lua) in the group's ``journal`` hash: ``<id>`` -> the log, lines
``"<ms>|<attempt>|<text>"`` joined by newlines, the oldest dropped past ``MAX_LINES`` lines or
``MAX_BYTES`` bytes; ``<id>|p`` -> ``"<fraction>|<ms>|<attempt>|<note>"``. Times are the worker's
clock when the handler made the call (the order of its own lines), not Redis's.
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
NEWLINE = "\u2424"         # a line's own newlines, stored (one stored line per call)
PROGRESS_SUFFIX = "|p"     # the progress field of a message: "<id>|p" (no message id contains '|')


def _ms_to_dt(ms: int) -> datetime | None:
    from .message import ms_to_dt
    return ms_to_dt(ms)


class JournalBuffer:
    """What a handler reported and the worker has not sent yet. Thread-safe without a lock: the
    handler appends, the keeper pops (deque operations are atomic)."""

    __slots__ = ("lines", "progress")

    def __init__(self):
        self.lines: deque[str] = deque()
        self.progress: deque[str] = deque()

    def __bool__(self) -> bool:
        return bool(self.lines) or bool(self.progress)

    def take(self) -> tuple[str, str]:
        """(the latest progress or '', the buffered lines joined, the oldest beyond the caps
        dropped), emptying the buffer."""
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
        return progress, "\n".join(cap_lines(lines))


def cap_lines(lines: list[str]) -> list[str]:
    """The newest lines within MAX_LINES and MAX_BYTES (what report.lua keeps as well)."""
    lines = lines[-MAX_LINES:]
    size = sum(len(s.encode()) + 1 for s in lines)
    start = 0
    while size > MAX_BYTES and start < len(lines):
        size -= len(lines[start].encode()) + 1
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
    note = str(note)[:MAX_NOTE].replace("\n", " ")
    return f"{value:.4g}|{int(time.time() * 1000)}|{attempt}|{note}"


def log_line(text: str, attempt: int) -> str:
    """A log call as stored: one line, cut at MAX_LINE characters."""
    text = str(text)
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
    def parse(cls, progress: bytes | str | None, log: bytes | str | None) -> "Journal":
        """From the two stored fields (either may be missing); unreadable parts are skipped."""
        fraction, note, at, att = None, "", None, 0
        if progress:
            text = progress.decode("utf-8", "replace") if isinstance(progress, bytes) else progress
            parts = text.split("|", 3)
            try:
                fraction, at, att, note = float(parts[0]), _ms_to_dt(int(parts[1])), int(parts[2]), parts[3]
            except (ValueError, IndexError):
                fraction = None
        lines = []
        if log:
            text = log.decode("utf-8", "replace") if isinstance(log, bytes) else log
            for raw in text.split("\n"):
                parts = raw.split("|", 2)
                try:
                    lines.append(LogLine(_ms_to_dt(int(parts[0])), int(parts[1]), parts[2].replace(NEWLINE, "\n")))
                except (ValueError, IndexError):
                    lines.append(LogLine(None, 0, raw[:MAX_LINE]))
        return cls(fraction, note, at, att, tuple(lines))

    @property
    def empty(self) -> bool:
        return self.progress is None and not self.lines
