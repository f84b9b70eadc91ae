"""Fire times of a schedule: cron expressions (seconds optional) in an IANA time zone, and fixed
intervals. Pure Python, no Redis: the engine computes the next fire times here and lua/schedule_tick.lua
decides, by Redis ``TIME``, which of them fires now.

Daylight-saving rules (tests/queue_core/test_cron.py proves each):

* A wall-clock time that happens twice when clocks go back fires once, at its first occurrence.
  Schedules whose hour field is ``*`` (they run every hour) follow elapsed time instead and also
  fire in the repeated hour's second pass.
* Wall-clock times that do not exist when clocks go forward fire once, at the instant of the jump
  (so "30 2 * * *" in Europe/Berlin fires at 03:00 CEST on that day). Schedules whose hour field
  is ``*`` have no ticks in the missing hour.

Times are epoch milliseconds everywhere (Redis's clock); cron ticks fall on whole seconds.
"""

import calendar
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property, lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import InvalidArgument

MIN_EVERY_MS = 100
# How far a search for the next fire time looks before it says "never" (a 29 February cron
# needs up to 8 years; nothing sensible needs more).
SEARCH_YEARS = 9
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
            "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
# (name, low, high, names) of each field, seconds first.
_FIELDS = (("second", 0, 59, None), ("minute", 0, 59, None), ("hour", 0, 23, None),
           ("day of month", 1, 31, None), ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_PROBE = timedelta(hours=6)          # transitions are months apart; a 6 h probe step finds each one
_MAX_SECOND = calendar.timegm((9999, 12, 30, 0, 0, 0))   # the last day whose local wall time datetime holds
_JUMP_IF_BEYOND = 4 * 86400          # a next match this far away is reached by a jump ...
_JUMP_BACK = 2 * 86400               # ... to this long before it (more than any UTC offset change:
#                                      Pacific/Apia moved by 24 h in 2011, a day and its offset)


def zone(tz: str) -> ZoneInfo:
    """The IANA time zone ``tz``, or InvalidArgument naming the field."""
    if not isinstance(tz, str) or not tz or len(tz) > 64:
        raise InvalidArgument(f"tz must be an IANA time zone name such as 'Europe/Berlin' (got {tz!r})")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"tz: unknown time zone {tz!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'") \
            from None


def _parse_value(text: str, field: tuple) -> int:
    name, low, high, names = field
    if names and text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise InvalidArgument(f"cron: {text!r} is not a valid {name}")
    value = int(text)
    if not low <= value <= high:
        raise InvalidArgument(f"cron: {name} {value} is outside {low}-{high}")
    return value


def _parse_field(text: str, field: tuple) -> frozenset[int]:
    name, low, high, _ = field
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise InvalidArgument(f"cron: step {step_text!r} in the {name} field must be a whole number >= 1")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = _parse_value(a, field), _parse_value(b, field)
            if start > end:
                raise InvalidArgument(f"cron: range {base!r} in the {name} field runs backwards")
        else:
            start = _parse_value(base, field)
            end = high if step_text else start
        values.update(range(start, end + 1, step))
    if field[0] == "day of week" and 7 in values:   # 0 and 7 are both Sunday
        values = (values - {7}) | {0}
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression: 5 fields (minute hour day-of-month month day-of-week) or 6 (a
    seconds field first), or an alias (@hourly, @daily, ...). Day of month and day of week combine
    as in Vixie cron: when both are restricted, a day matching either one matches."""

    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool
    any_weekday: bool
    every_hour: bool     # hour field '*': follows elapsed time across DST changes (module docstring)

    @classmethod
    def parse(cls, text: str) -> "Cron":
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("cron must be a non-empty expression such as '0 3 * * *'")
        expr = _ALIASES.get(text.strip().lower(), text.strip())
        parts = expr.split()
        if len(parts) == 5:
            parts = ["0", *parts]
        if len(parts) != 6:
            raise InvalidArgument(f"cron {text!r}: expected 5 fields (minute hour day month weekday) or 6 "
                                  f"(with seconds first), got {len(parts)}")
        sets = [_parse_field(p, f) for p, f in zip(parts, _FIELDS, strict=True)]
        cron = cls(text.strip(), *sets, any_day=parts[3] == "*", any_weekday=parts[5] == "*",
                   every_hour=parts[2] == "*")
        if cron.next_naive(datetime(2000, 1, 1)) is None:
            raise InvalidArgument(f"cron {text!r} never fires (no such date)")
        return cron

    def _day_ok(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.weekday() + 1) % 7 in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return dow
        if self.any_weekday:
            return dom
        return dom or dow

    @cached_property
    def _sorted(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return tuple(sorted(x) for x in (self.hours, self.minutes, self.seconds, self.months))

    def next_naive(self, w: datetime) -> datetime | None:
        """The first wall-clock time >= ``w`` (naive, whole seconds) that matches, or None within
        SEARCH_YEARS. Walks only the months the expression names and, when it names days of the
        month but not weekdays, only those days: a 29 February takes one step per year."""
        w = w.replace(microsecond=0)
        start = w.date()
        if self._day_ok(start):                          # the usual case: a time later the same day
            t = self._time_on(start, (w.hour, w.minute, w.second))
            if t is not None:
                return t
        limit = min(w.year + SEARCH_YEARS, 9999)        # datetime ends in 9999: no later tick exists
        *_, months = self._sorted
        for year in range(w.year, limit + 1):
            for month in months:
                if (year, month) < (start.year, start.month):
                    continue
                first = start.day if (year, month) == (start.year, start.month) else 1
                for day in self._days(year, month, first):
                    t = self._time_on(day, (w.hour, w.minute, w.second) if day == start else (0, 0, 0))
                    if t is not None:
                        return t
        return None

    def _days(self, year: int, month: int, first: int) -> Iterator[date]:
        """The days of a month from day ``first`` that match the day fields."""
        last = calendar.monthrange(year, month)[1]
        if self.any_weekday and not self.any_day:       # days of the month only: step through those
            candidates = (d for d in sorted(self.days) if first <= d <= last)
        else:
            candidates = range(first, last + 1)
        for d in candidates:
            day = date(year, month, d)
            if self._day_ok(day):
                yield day

    def _time_on(self, day: date, at: tuple[int, int, int]) -> datetime | None:
        """The first matching time of ``day`` at or after ``at`` (h, m, s)."""
        h0, m0, s0 = at
        hours, minutes, seconds, _ = self._sorted
        for h in hours:
            if h < h0:
                continue
            for m in minutes:
                if h == h0 and m < m0:
                    continue
                floor = s0 if (h, m) == (h0, m0) else 0
                for s in seconds:
                    if s >= floor:
                        return datetime(day.year, day.month, day.day, h, m, s)
        return None

    def describe(self) -> str:
        """The expression in words, for lists and pages ("Weekdays at 03:00")."""
        single = [len(x) == 1 for x in (self.seconds, self.minutes, self.hours)]
        sec, minute, hour = (min(x) for x in (self.seconds, self.minutes, self.hours))
        if all(single):
            clock = f"{hour:02d}:{minute:02d}" + (f":{sec:02d}" if sec else "")
            when = f"at {clock}"
        elif single[0] and single[1] and self.every_hour:
            when = f"every hour at :{minute:02d}" + (f":{sec:02d}" if sec else "")
        elif self.seconds == frozenset(range(60)) and self.every_hour and len(self.minutes) == 60:
            when = "every second"
        elif single[0] and sec == 0 and len(self.minutes) == 60 and self.every_hour:
            when = "every minute"
        else:
            return f"cron '{self.text}'"
        days = "every day"
        if not self.any_weekday and self.any_day:
            if self.weekdays == frozenset({1, 2, 3, 4, 5}):
                days = "weekdays"
            elif self.weekdays == frozenset({0, 6}):
                days = "weekends"
            else:
                days = ", ".join(calendar.day_name[(d - 1) % 7] + "s" for d in sorted(self.weekdays))
        elif not self.any_day and self.any_weekday:
            days = "on day " + ", ".join(str(d) for d in sorted(self.days)) + " of the month"
        elif not (self.any_day and self.any_weekday):
            return f"cron '{self.text}'"
        if self.months != frozenset(range(1, 13)):
            days += " in " + ", ".join(calendar.month_abbr[m] for m in sorted(self.months))
        text = f"{days} {when}"
        return text[0].upper() + text[1:]


def _offset(tz: ZoneInfo, instant: int) -> int:
    """UTC offset (seconds) of ``tz`` at the epoch second ``instant``."""
    return int(datetime.fromtimestamp(instant, tz).utcoffset().total_seconds())


def _probe_transition(tz: ZoneInfo, start: int, end: int) -> int | None:
    """The first epoch second in (start, end] at which the offset differs from the one at
    ``start``, or None. Probes every 6 h, then bisects to the second."""
    base = _offset(tz, start)
    low = start
    while low < end:
        high = min(low + int(_PROBE.total_seconds()), end)
        if _offset(tz, high) != base:
            while high - low > 1:
                mid = (low + high) // 2
                if _offset(tz, mid) == base:
                    low = mid
                else:
                    high = mid
            return high
        low = high
    return None


@lru_cache(maxsize=1024)
def _year_transitions(tz: ZoneInfo, year: int) -> tuple[int, ...]:
    """The epoch seconds of ``year`` (UTC) at which ``tz``'s offset changes, found once per zone
    and year (~1,500 offset probes) so that each fire time needs a lookup, not a probe."""
    begin = calendar.timegm((year, 1, 1, 0, 0, 0)) - 1
    stop = calendar.timegm((year + 1, 1, 1, 0, 0, 0)) - 1
    out = []
    while (change := _probe_transition(tz, begin, stop)) is not None:
        out.append(change)
        begin = change
    return tuple(out)


def _transition_after(tz: ZoneInfo, start: int, end: int) -> int | None:
    """The first epoch second in (start, end] at which ``tz``'s offset changes, or None."""
    year = datetime.fromtimestamp(start + 1, UTC).year
    last = datetime.fromtimestamp(min(end, _MAX_SECOND), UTC).year
    while year <= last:
        changes = _year_transitions(tz, year)
        i = bisect_right(changes, start)
        if i < len(changes):
            return changes[i] if changes[i] <= end else None
        year += 1
    return None


def _wall(instant: int, offset: int) -> datetime:
    return datetime(1970, 1, 1) + timedelta(seconds=instant + offset)


def _instant(wall: datetime, offset: int) -> int:
    return int((wall - datetime(1970, 1, 1)).total_seconds()) - offset


def cron_next(cron: Cron, tz: ZoneInfo, after_ms: int) -> int | None:
    """The first fire time (epoch ms) strictly after ``after_ms``, under the DST rules of the
    module docstring; None if it never fires again (within SEARCH_YEARS)."""
    t = after_ms // 1000 + 1                       # first whole second strictly after
    wall_from: datetime | None = None              # where the naive search resumes (inclusive)
    off = _offset(tz, t)
    # Started inside the second pass of a repeated hour: a fixed-hour schedule's wall times there
    # already fired in the first pass.
    if not cron.every_hour:
        back = _transition_after(tz, t - 4 * 3600, t)
        if back is not None and back <= t:
            before = _offset(tz, back - 1)
            if before > off and _wall(t, off) < _wall(back, before):
                wall_from = _wall(back, before)
    horizon = min(t + SEARCH_YEARS * 366 * 86400, _MAX_SECOND)
    while True:
        start = max(wall_from or _wall(t, off), _wall(t, off))
        c = cron.next_naive(start)
        if c is None:
            return None
        inst = _instant(c, off)                    # its instant if the offset holds until then
        if inst > horizon:
            return None
        if inst - t > _JUMP_IF_BEYOND:
            # The next matching wall time is days away, so no wall time before it matches and
            # the transitions on the way decide nothing but the offset at c: go straight to a
            # day before it (offsets differ by less than a day) and decide there. A 29 February
            # costs a step per year, not one per day or per transition.
            target = inst - _JUMP_BACK
            # An hour-'*' schedule fires again in a repeated hour (module docstring): never jump
            # over clocks going back; stop at that change and let the loop below handle it.
            back = _transition_after(tz, t, target) if cron.every_hour else None
            while back is not None and _offset(tz, back) > off:     # forward changes decide nothing
                off = _offset(tz, back)
                back = _transition_after(tz, back, target)
            if back is not None:
                t, off, wall_from = back, _offset(tz, back), None
                continue
            t = target
            off, wall_from = _offset(tz, t), None
            continue
        change = _transition_after(tz, t, inst)
        if change is None:
            return inst * 1000
        wall_from = None
        new = _offset(tz, change)
        if new > off:
            # Clocks go forward: wall times [change+off, change+new) do not exist.
            if not cron.every_hour:
                gap = cron.next_naive(_wall(change, off))
                if gap is not None and gap < _wall(change, new):
                    return change * 1000
        elif not cron.every_hour:
            # Clocks go back: the repeated wall times fired in the first pass.
            wall_from = _wall(change, off)
        t, off = change, new


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: a cron expression in a time zone, or every ``every_ms`` from
    ``anchor_ms`` (the start, else the epoch, so intervals line up across upserts); both bounded by
    ``start_ms``/``end_ms`` (0 = unbounded)."""

    cron: Cron | None
    tz: ZoneInfo
    every_ms: int
    start_ms: int = 0
    end_ms: int = 0

    def next_after(self, after_ms: int) -> int | None:
        """The first fire time strictly after ``after_ms`` (and not before the start), or None
        when the schedule has no more (past its end, or a cron with no more matches)."""
        after_ms = max(after_ms, self.start_ms - 1)
        if self.cron is not None:
            nxt = cron_next(self.cron, self.tz, after_ms)
        else:
            anchor = self.start_ms
            nxt = anchor + ((after_ms - anchor) // self.every_ms + 1) * self.every_ms
        if nxt is None or (self.end_ms and nxt > self.end_ms):
            return None
        return nxt

    def times(self, after_ms: int) -> Iterator[int]:
        """Fire times strictly after ``after_ms``, in order."""
        t = self.next_after(after_ms)
        while t is not None:
            yield t
            t = self.next_after(t)

    def count(self, after_ms: int, until_ms: int, cap: int) -> int:
        """How many fire times fall in (after_ms, until_ms], counting no further than ``cap`` + 1
        (so a caller can tell "more than cap"). Intervals are counted at once, cron times one
        search each."""
        if self.cron is None:
            first = self.next_after(after_ms)
            if first is None or first > until_ms:
                return 0
            last = min(until_ms, self.end_ms) if self.end_ms else until_ms
            return min((last - first) // self.every_ms + 1, cap + 1)
        n = 0
        for t in self.times(after_ms):
            if t > until_ms:
                break
            n += 1
            if n > cap:
                break
        return n

    def describe(self) -> str:
        if self.cron is not None:
            return f"{self.cron.describe()} {self.tz.key}"
        seconds = self.every_ms / 1000
        return f"Every {seconds:g} s" if seconds < 60 or seconds % 60 else f"Every {seconds / 60:g} min"


def as_utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
