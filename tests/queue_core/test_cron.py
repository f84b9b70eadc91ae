"""Fire times (queue_core/cron.py): cron fields with seconds, names and aliases, time zones and
the DST rules (a repeated wall time fires once, a skipped one at the jump, hourly schedules follow
elapsed time), intervals and bounds, the expression in words. No Redis."""

import itertools
import random
import time
from datetime import UTC, date, datetime, timedelta

import pytest

from queue_core import InvalidArgument
from queue_core.cron import Cron, Timing, cron_next, zone

BERLIN = zone("Europe/Berlin")


def berlin_times(expr: str, start_iso: str, n: int) -> list[str]:
    """The next ``n`` fire times of ``expr`` in Berlin after ``start_iso``, as Berlin ISO strings."""
    timing = Timing(Cron.parse(expr), BERLIN, 0)
    start = int(datetime.fromisoformat(start_iso).timestamp() * 1000)
    out = []
    for t in timing.times(start):
        out.append(datetime.fromtimestamp(t / 1000, BERLIN).isoformat())
        if len(out) == n:
            return out
    return out


def count_between(expr: str, start_iso: str, end_iso: str) -> int:
    timing = Timing(Cron.parse(expr), BERLIN, 0)
    start = int(datetime.fromisoformat(start_iso).timestamp() * 1000)
    end = int(datetime.fromisoformat(end_iso).timestamp() * 1000)
    n = 0
    for t in timing.times(start):
        if t > end:
            return n
        n += 1
    return n


def test_cron_seconds_field_names_and_aliases():
    """Six fields put seconds first; month and weekday names and @aliases parse."""
    assert berlin_times("*/20 * * * * *", "2026-06-01T10:00:00+00:00", 3) == [
        "2026-06-01T12:00:20+02:00", "2026-06-01T12:00:40+02:00", "2026-06-01T12:01:00+02:00"]
    assert berlin_times("0 9 * jan mon-fri", "2026-01-02T12:00:00+00:00", 2) == [
        "2026-01-05T09:00:00+01:00", "2026-01-06T09:00:00+01:00"]
    assert Cron.parse("@daily").hours == frozenset({0})


def test_spring_forward_fixed_time_fires_once_at_the_jump():
    """02:30 does not exist on 2026-03-29 in Berlin: that day's tick fires once, at 03:00 CEST."""
    assert berlin_times("30 2 * * *", "2026-03-27T12:00:00+00:00", 3) == [
        "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    # Several missing wall times (02:00, 02:15, ...) still make one tick at the jump.
    assert berlin_times("*/15 2 * * *", "2026-03-28T23:00:00+00:00", 2) == [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"]


def test_fall_back_fixed_time_fires_once():
    """02:30 happens twice on 2026-10-25 in Berlin: it fires once, at the first occurrence, and a
    search starting inside the second pass does not fire it again."""
    assert berlin_times("30 2 * * *", "2026-10-24T12:00:00+00:00", 2) == [
        "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
    assert berlin_times("30 2 * * *", "2026-10-25T01:10:00+00:00", 1) == ["2026-10-26T02:30:00+01:00"]


def test_hourly_schedules_follow_elapsed_time_across_dst():
    """A schedule with hour '*' fires in both passes of the repeated hour (50 half-hours that
    day) and has no ticks in the missing hour (46)."""
    assert count_between("*/30 * * * *", "2026-10-24T21:59:00+00:00", "2026-10-25T22:59:00+00:00") == 50
    assert count_between("*/30 * * * *", "2026-03-28T22:59:00+00:00", "2026-03-29T21:59:00+00:00") == 46


def test_every_lines_up_on_the_start_and_respects_end():
    """every= ticks are start + k * every, none past the end."""
    timing = Timing(None, zone("UTC"), 250, start_ms=1_000, end_ms=2_000)
    assert list(timing.times(0)) == [1000, 1250, 1500, 1750, 2000]


def test_expression_in_words():
    """describe() says what a reader needs: days, time, zone."""
    assert Timing(Cron.parse("0 3 * * 1-5"), BERLIN, 0).describe() == "Weekdays at 03:00 Europe/Berlin"
    assert Timing(None, zone("UTC"), 30_000, 0).describe() == "Every 30 s"


@pytest.mark.parametrize(("expr", "words"), [
    ("0 3 * *", "expected 5 fields"), ("61 * * * *", "minute 61 is outside 0-59"),
    ("0 0 31 2 *", "never fires"), ("*/0 * * * *", "step '0'"), ("x * * * *", "'x' is not a valid minute")])
def test_invalid_cron_names_the_problem(expr, words):
    """A bad expression is refused with what is wrong in it."""
    with pytest.raises(InvalidArgument, match=words):
        Cron.parse(expr)


def _brute_force(cron: Cron, tz, start: int, end: int) -> list[int]:
    """The module docstring's rules checked instant by instant (each minute, UTC seconds): a
    matching wall time fires at its first occurrence (both, for hour '*'); wall times skipped by
    a jump fire once at the jump (not for hour '*'). Independent of cron_next's segment search."""
    out = []
    for t in range(start, end, 60):
        here = datetime.fromtimestamp(t, tz)
        wall = here.replace(tzinfo=None)
        if cron.next_naive(wall) == wall:
            # The same wall time already happened within the last two hours: clocks went back.
            second_pass = any(datetime.fromtimestamp(u, tz).replace(tzinfo=None) == wall for u in range(t - 7200, t, 60))
            if cron.every_hour or not second_pass:
                out.append(t * 1000)
                continue
        before, after = datetime.fromtimestamp(t - 60, tz).utcoffset(), here.utcoffset()
        if after > before and not cron.every_hour:   # a jump forward at t: the wall times it skipped
            gap_start = datetime.fromtimestamp(t - 60, tz).replace(tzinfo=None) + timedelta(minutes=1)
            gap_end = gap_start + (after - before)
            hit = cron.next_naive(gap_start)
            if hit is not None and hit < gap_end:
                out.append(t * 1000)
    return out


@pytest.mark.parametrize("zone_name", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
def test_cron_next_agrees_with_an_instant_by_instant_check_around_dst(zone_name):
    """Random minute-resolution expressions over two days around each DST change of 2026 (Lord
    Howe moves 30 minutes): cron_next's segment search gives exactly the brute force's ticks."""
    tz = zone(zone_name)
    rng = random.Random(34)
    year = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    changes, t, off = [], year, tz.utcoffset(datetime(2026, 1, 1))
    while t < year + 366 * 86400:               # the year's transitions, to the hour
        now = datetime.fromtimestamp(t, tz).utcoffset()
        if now != off:
            changes.append(t)
            off = now
        t += 3600
    assert len(changes) == 2, changes
    for change in changes:
        start, end = change - 86400, change + 86400
        for _ in range(12):
            minute = rng.choice(["*/15", "0", "30", "0,45", "*/20"])
            hour = rng.choice(["*", "*", "1", "2", "1-3", "0,2", "*/2"])
            cron = Cron.parse(f"{minute} {hour} * * *")
            got = []
            t = start * 1000 - 1
            while (t := cron_next(cron, tz, t)) is not None and t < end * 1000:
                got.append(t)
            assert got == _brute_force(cron, tz, start, end), (zone_name, cron.text, change)


def _local_days(tz, first: date, last: date, day_ok, hour: int) -> list[int]:
    """Each day in [first, last] that ``day_ok`` accepts, at ``hour``:00 local time (an hour no
    DST change of these zones touches), as epoch ms: counted day by day, independently of cron.py."""
    out, d = [], first
    while d <= last:
        if day_ok(d):
            out.append(int(datetime(d.year, d.month, d.day, hour, tzinfo=tz).timestamp() * 1000))
        d += timedelta(days=1)
    return out


@pytest.mark.parametrize("zone_name", ["UTC", "Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize(("expr", "hour", "day_ok"), [
    ("0 0 29 2 *", 0, lambda d: (d.month, d.day) == (2, 29)),                       # leap days only
    ("0 12 31 * *", 12, lambda d: d.day == 31),                                     # months that have a 31st
    ("0 0 13 * 5", 0, lambda d: d.day == 13 or d.weekday() == 4),                   # Vixie: 13th OR Friday
    ("0 12 29 2 1", 12, lambda d: (d.month == 2 and d.day == 29) or (d.month == 2 and d.weekday() == 0)),
])
def test_rare_day_expressions_agree_with_a_day_by_day_count(zone_name, expr, hour, day_ok):
    """Month and day skipping finds exactly the days a plain walk over 20 years finds."""
    tz = zone(zone_name)
    start, end = datetime(2026, 1, 1, tzinfo=tz), datetime(2045, 12, 31, 23, tzinfo=tz)
    expected = _local_days(tz, start.date(), end.date(), day_ok, hour)
    timing = Timing(Cron.parse(expr), tz, 0)
    got = []
    for t in timing.times(int(start.timestamp() * 1000) - 1):
        if t > end.timestamp() * 1000:
            break
        got.append(t)
    assert got == expected
    assert timing.count(int(start.timestamp() * 1000) - 1, int(end.timestamp() * 1000), cap=10_000) == len(expected)


@pytest.mark.parametrize(("expr", "first_three"), [
    ("0 0 29 2 *", ["2028-02-29T00:00:00+01:00", "2032-02-29T00:00:00+01:00", "2036-02-29T00:00:00+01:00"]),
    ("0 0 31 * *", ["2026-12-31T00:00:00+01:00", "2027-01-31T00:00:00+01:00", "2027-03-31T00:00:00+02:00"]),
])
def test_rare_expressions_answer_in_milliseconds(expr, first_three):
    """The next 5 times of a 29 February (one every 4 years) or of "the 31st" took 1.5-2 s when
    the search stepped day by day and every 8 days re-probed the zone; now it skips by month and
    day and jumps to the next match. The bound is generous (measured ~13 ms on a loaded 2-core
    machine, with the zone's transition table cold): it catches a return to the old search."""
    from queue_core import cron

    cron._year_transitions.cache_clear()
    timing = Timing(Cron.parse(expr), BERLIN, 0)
    started = time.perf_counter()
    times = list(itertools.islice(timing.times(int(datetime(2026, 11, 25, tzinfo=UTC).timestamp() * 1000)), 5))
    elapsed = time.perf_counter() - started
    assert [datetime.fromtimestamp(t / 1000, BERLIN).isoformat() for t in times[:3]] == first_three
    assert len(times) == 5 and elapsed < 0.2, elapsed


def test_count_says_how_many_fire_times_up_to_one_past_the_cap():
    """count() agrees with listing the times, for intervals (counted at once) and cron, and stops
    at cap + 1 so a caller can say "more than cap"."""
    every = Timing(None, zone("UTC"), 250, start_ms=1_000, end_ms=20_000)
    assert every.count(0, 10_000, cap=100) == len([t for t in every.times(0) if t <= 10_000]) == 37
    assert every.count(0, 10_000_000, cap=100) == len(list(every.times(0))) == 77     # bounded by end_ms
    assert every.count(0, 10_000, cap=5) == 6 and every.count(30_000, 40_000, cap=5) == 0
    cron = Timing(Cron.parse("*/15 * * * *"), BERLIN, 0)
    day = int(datetime(2026, 10, 25, tzinfo=BERLIN).timestamp() * 1000)
    assert cron.count(day - 1, day + 90_000_000 - 1, cap=1000) == 100     # the 25-hour day of the fall-back
    assert cron.count(day - 1, day + 90_000_000 - 1, cap=10) == 11


def _next_times(expr: str, zone_name: str, start: datetime, n: int) -> list[str]:
    tz = zone(zone_name)
    c, at, out = Cron.parse(expr), int(start.replace(tzinfo=tz).timestamp() * 1000), []
    for _ in range(n):
        at = cron_next(c, tz, at)
        out.append(datetime.fromtimestamp(at / 1000, tz).isoformat())
    return out


@pytest.mark.parametrize("zone_name, expr, start, last_two", [
    # Clocks go back at midnight, so the day's last hour repeats: found days ahead by a jump.
    ("America/Santiago", "30 * * * 6", datetime(2025, 3, 30), ["2025-04-05T23:30:00-03:00", "2025-04-05T23:30:00-04:00"]),
    ("Asia/Beirut", "30 * * * 6", datetime(2024, 10, 20), ["2024-10-26T23:30:00+03:00", "2024-10-26T23:30:00+02:00"]),
    ("Africa/Cairo", "0 * 31 10 *", datetime(2024, 10, 20), ["2024-10-31T23:00:00+03:00", "2024-10-31T23:00:00+02:00"]),
])
def test_finding_an_hourly_cron_reached_by_a_jump_fires_again_in_the_repeated_hour(zone_name, expr, start, last_two):
    """A review found the days-ahead jump stepped over a fall-back change, so an hour-'*' cron lost
    its second pass of the repeated hour (the module docstring's rule)."""
    times = _next_times(expr, zone_name, start, 60)
    i = times.index(last_two[0])
    assert times[i:i + 2] == last_two


def test_finding_a_jump_back_covers_apias_day_long_offset_change():
    """Pacific/Apia moved from -10 to +14 on 2011-12-29; a one-day jump back landed after the
    next match and dropped it (a review found it; backfill reads such past ranges)."""
    assert _next_times("49 23 16-31/2 3 2,7,3", "Pacific/Apia", datetime(2011, 8, 8), 2) == [
        "2012-03-04T23:49:00+14:00", "2012-03-06T23:49:00+14:00"]
