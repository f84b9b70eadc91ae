"""Schedules in the engine (engine/schedules.py, engine/ticks.py): bad input, listing, backfill,
pause/resume/run now, delete, upsert. How a tick is decided (lua/schedule_tick.lua) is in
test_schedule_tick.py."""

from datetime import UTC, datetime, timedelta

import pytest

from queue_core import InvalidArgument, ScheduleNotFound
from queue_core.cron import zone

from .helpers import HOUR, drain, rewind, this_hour

BERLIN = zone("Europe/Berlin")


def test_bad_input_names_the_field(dq):
    """Unknown zone, tiny interval, long name, missing topic, both or neither timing: clear errors."""
    dq.configure_topic("jobs")
    cases = [(dict(cron="0 3 * * *", tz="Mars/Olympus"), "tz: unknown time zone"),
             (dict(every=0.05), "every must be at least 0.1 s"),
             (dict(every=1, overlap="queue"), "overlap must be one of"),
             (dict(cron="0 3 * * *", every=5), "exactly one of cron"),
             (dict(), "exactly one of cron"),
             (dict(cron="0 3 * *"), "expected 5 fields")]
    for kwargs, words in cases:
        with pytest.raises(InvalidArgument, match=words):
            dq.upsert_schedule("s", topic="jobs", **kwargs)
    with pytest.raises(InvalidArgument, match="invalid schedule name"):
        dq.upsert_schedule("n" * 201, topic="jobs", every=1)
    with pytest.raises(InvalidArgument, match="topic: no topic named 'nope'"):
        dq.upsert_schedule("s", topic="nope", every=1)
    assert dq.schedules() == []


def test_upsert_lists_the_schedule_with_its_next_times(dq):
    """A new schedule is active, its next tick is after now, and listing shows it in words."""
    dq.configure_topic("reports")
    now = dq.server_ms()
    s = dq.upsert_schedule("nightly", topic="reports", cron="0 3 * * *", tz="Europe/Berlin",
                           payload={"kind": "nightly"}, overlap="skip", catchup_window=3600)
    assert s.state == "active" and s.next_ms > now and s.runs == 0
    times = s.next_times(3)
    assert [datetime.fromtimestamp(t / 1000, BERLIN).strftime("%H:%M") for t in times] == ["03:00"] * 3
    assert times[1] - times[0] in (23 * HOUR, 24 * HOUR, 25 * HOUR)
    [listed] = dq.schedules()
    assert (listed.name, listed.description, listed.payload) == ("nightly", "Every day at 03:00 Europe/Berlin",
                                                                  b'{"kind":"nightly"}')


def test_schedule_index_and_reading_some_by_name(dq):
    """schedule_index() reads the registry alone; schedules(names=) reads just those, leaving
    unknown names out."""
    dq.configure_topic("jobs")
    for name in ("a", "b", "c"):
        dq.upsert_schedule(name, topic="jobs", every=60)
    index = dq.schedule_index()
    assert sorted(index) == ["a", "b", "c"] and {t for t, _p in index.values()} == {"jobs"}
    assert [s.name for s in dq.schedules(names=["c", "nope", "a"])] == ["a", "c"]
    assert dq.schedules(names=[]) == []


def test_backfill_publishes_the_ticks_of_a_past_range_once(dq):
    """backfill_schedule: a dry run lists the range's ticks; the real one publishes them keyed and
    marked; again, it publishes none twice; an open or too large range is refused."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("b", topic="jobs", every=60, payload="fill")
    end_ms = dq.server_ms() // 60_000 * 60_000 - 60_000
    start, end = (datetime.fromtimestamp((end_ms - 4 * 60_000) / 1000, UTC), datetime.fromtimestamp(end_ms / 1000, UTC))
    plan = dq.backfill_schedule("b", start, end, dry_run=True)
    assert plan.ticks == [end_ms - k * 60_000 for k in range(4, -1, -1)] and plan.published == []
    done = dq.backfill_schedule("b", start, end)
    assert len(done.published) == 5 and done.existing == []
    again = dq.backfill_schedule("b", start, end)
    assert again.published == [] and sorted(again.existing) == sorted(done.published)
    msgs = drain(dq, "jobs")
    assert sorted(d.message.key for d in msgs) == sorted(f"schedule:b:{t}" for t in plan.ticks)
    assert {d.message.headers["delayq-backfill"] for d in msgs} == {"1"} and dq.schedule("b").runs == 0
    with pytest.raises(InvalidArgument, match="end is in the future"):
        dq.backfill_schedule("b", start, datetime.now(UTC) + timedelta(hours=1))
    with pytest.raises(InvalidArgument, match="more than 3 ticks"):
        dq.backfill_schedule("b", start, end, limit=3)


def test_partial_backfill_walks_a_long_range_in_pieces(dq):
    """partial=True takes the first ``limit`` ticks and says where the rest start; walking from
    there covers the range once, and the last piece says there is no rest."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("w", topic="jobs", every=60)
    end_ms = dq.server_ms() // 60_000 * 60_000 - 60_000
    first_ms = end_ms - 6 * 60_000
    as_dt = lambda ms: datetime.fromtimestamp(ms / 1000, UTC)   # noqa: E731
    plan = dq.backfill_schedule("w", as_dt(first_ms), as_dt(end_ms), dry_run=True, limit=3, partial=True)
    assert plan.ticks == [first_ms, first_ms + 60_000, first_ms + 120_000] and plan.rest_ms == first_ms + 180_000
    assert sum(dq.counts("jobs").values()) == 0
    covered, start = [], first_ms
    while True:
        piece = dq.backfill_schedule("w", as_dt(start), as_dt(end_ms), limit=3, partial=True)
        covered += piece.ticks
        assert len(piece.published) == len(piece.ticks)
        if piece.rest_ms is None:
            break
        start = piece.rest_ms
    assert covered == [first_ms + k * 60_000 for k in range(7)]
    assert sorted(d.message.key for d in drain(dq, "jobs")) == sorted(f"schedule:w:{t}" for t in covered)


def test_pause_resume_and_run_now(dq):
    """A paused schedule fires nothing and shows its note; run now publishes anyway; resume
    picks the next tick after now."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("p", topic="jobs", every=3600, catchup_window=7200)
    rewind(dq, "p", this_hour(dq))
    assert dq.pause_schedule("p", note="migration window") is True
    assert dq.tick_schedule("p").outcome == "idle"
    s = dq.schedule("p")
    assert s.state == "paused" and s.paused["note"] == "migration window"
    msg_id = dq.run_schedule_now("p")
    [d] = drain(dq, "jobs")
    assert d.id == msg_id and d.message.key.startswith("schedule:p:now:")
    nxt = dq.resume_schedule("p")
    assert nxt > dq.server_ms() and dq.schedule("p").state == "active"
    assert dq.tick_schedule("p").outcome == "not_due"


def test_delete_removes_the_schedule_and_keeps_its_messages(dq):
    """delete_schedule forgets the schedule; what it published stays."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("d", topic="jobs", every=3600, catchup_window=7200)
    rewind(dq, "d", this_hour(dq))
    dq.tick_schedule("d")
    assert dq.delete_schedule("d") is True and dq.delete_schedule("d") is False
    assert dq.schedules() == []
    with pytest.raises(ScheduleNotFound):
        dq.pause_schedule("d")
    assert len(drain(dq, "jobs")) == 1


def test_upsert_keeps_counters_and_never_refires_a_fired_tick(dq):
    """Replacing a schedule keeps its counters; its next tick is after the last one fired."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("u", topic="jobs", every=3600, catchup_window=7200)
    tick = this_hour(dq)
    rewind(dq, "u", tick)
    dq.tick_schedule("u")
    s = dq.upsert_schedule("u", topic="jobs", every=1800, catchup_window=7200, payload="v2")
    assert s.runs == 1 and s.next_ms > tick and s.payload == b"v2"
    rewind(dq, "u", tick)                     # even pointed back at the fired tick
    r = dq.tick_schedule("u")
    assert not (r.outcome == "fired" and r.tick_ms == tick)
    assert [d.message.headers["delayq-tick"] for d in drain(dq, "jobs")].count(str(tick)) == 1
