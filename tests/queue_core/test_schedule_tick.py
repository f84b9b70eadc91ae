"""lua/schedule_tick.lua, the decision "this tick fires now, once" (DelayQueue.tick_schedule):
exactly once with racing tickers, refusals that write nothing, catch-up, overlap, max_runs,
start and jitter. The schedules' CRUD and reads are in test_schedules.py."""

import hashlib
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from queue_core.cron import zone

from .helpers import HOUR, drain, rewind, this_hour

BERLIN = zone("Europe/Berlin")



def test_a_due_tick_fires_once_with_its_dedup_key(dq):
    """The due tick is published once, keyed schedule:<name>:<tick>, headed with its name and
    tick; asking again fires nothing until the next tick."""
    dq.configure_topic("reports")
    dq.upsert_schedule("hourly", topic="reports", every=3600, catchup_window=7200, payload="go")
    tick = this_hour(dq)
    rewind(dq, "hourly", tick)
    r = dq.tick_schedule("hourly")
    assert (r.outcome, r.tick_ms, r.next_ms) == ("fired", tick, tick + HOUR)
    assert dq.tick_schedule("hourly").outcome == "not_due"
    [d] = drain(dq, "reports")
    assert d.id == r.message_id and d.message.payload == b"go"
    assert d.message.key == f"schedule:hourly:{tick}"
    assert d.message.headers == {"delayq-schedule": "hourly", "delayq-tick": str(tick)}
    s = dq.schedule("hourly")
    assert (s.runs, s.missed, s.last_tick_ms, s.ticks[0].outcome) == (1, 0, tick, "fired")


def test_a_tick_publish_refuses_changes_nothing(dq):
    """A tick whose publish is refused (its payload is over the topic's cap) raises the publish's
    error and writes nothing: not the tick, nor its counters, nor its recent ticks."""
    from queue_core import PayloadTooLarge

    dq.configure_topic("small")
    # Ten minutes away with a five-minute window: the older ticks are missed before one would fire.
    dq.upsert_schedule("big", topic="small", every=60, catchup_window=270, payload="x" * 2000)
    dq.configure_topic("small", max_payload_bytes=1000)
    base = dq.server_ms() // 60_000 * 60_000 - 10 * 60_000
    rewind(dq, "big", base)
    with pytest.raises(PayloadTooLarge):
        dq.tick_schedule("big")
    s = dq.schedule("big")
    assert (s.next_ms, s.runs, s.missed, s.ticks) == (base, 0, 0, [])
    assert sum(dq.counts("small").values()) == 0


def test_racing_tickers_fire_each_tick_once(dq):
    """Eight threads asking for the same due tick at once: one publishes."""
    dq.configure_topic("reports")
    dq.upsert_schedule("race", topic="reports", every=3600, catchup_window=7200)
    rewind(dq, "race", this_hour(dq))
    results, barrier = [], threading.Barrier(8)

    def tick():
        barrier.wait()
        results.append(dq.tick_schedule("race").outcome)
    threads = [threading.Thread(target=tick) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert Counter(results)["fired"] == 1 and len(results) == 8
    assert len(drain(dq, "reports")) == 1


def test_catchup_fires_young_missed_ticks_once_each_and_counts_old_ones(dq):
    """After an outage, ticks younger than the catch-up window fire once each, older ones are
    counted missed and not fired."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("m", topic="jobs", every=60, catchup_window=150)
    now = dq.server_ms()
    last = now // 60_000 * 60_000
    rewind(dq, "m", last - 5 * 60_000)   # ticks at -5, -4, ..., 0 minutes (from the last whole minute)
    outcomes = []
    while (r := dq.tick_schedule("m")).outcome != "not_due":
        outcomes.append(r.outcome)
        assert len(outcomes) < 20
    fired = [d.message.headers["delayq-tick"] for d in drain(dq, "jobs")]
    young = [t for t in range(last - 5 * 60_000, last + 1, 60_000) if now - t <= 150_000]
    assert sorted(map(int, fired)) == young
    s = dq.schedule("m")
    assert s.missed == 6 - len(young) and s.runs == len(young)
    assert sum(t.count for t in s.ticks if t.outcome == "missed") == s.missed


def test_a_long_outage_is_skipped_in_a_few_calls(dq):
    """A 0.1 s schedule away for a day: the ~864,000 old ticks are counted in a few calls, none fired."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("fast", topic="jobs", every=0.1, catchup_window=1)
    start = dq.server_ms() - 86_400_000
    rewind(dq, "fast", start // 100 * 100)
    calls = 0
    while dq.tick_schedule("fast").outcome not in ("not_due", "fired"):
        calls += 1
        assert calls < 5
    s = dq.schedule("fast")
    assert 863_900 <= s.missed <= 864_000
    assert s.runs <= 1 and len(drain(dq, "jobs")) == s.runs


def test_overlap_skip_waits_for_the_previous_message(dq):
    """overlap=skip: no tick while the previous tick's message is unfinished in the default
    group (counted skipped); once acked, the next tick fires."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("o", topic="jobs", every=60, catchup_window=7200, overlap="skip")
    base = dq.server_ms() // 60_000 * 60_000 - 10 * 60_000
    rewind(dq, "o", base)
    assert dq.tick_schedule("o").outcome == "fired"
    [held] = dq.claim("jobs", 10)                     # unacked: still running
    rewind(dq, "o", base + 60_000)
    r = dq.tick_schedule("o")
    assert r.outcome == "skipped" and r.message_id is None
    dq.ack(held)
    rewind(dq, "o", base + 120_000)
    assert dq.tick_schedule("o").outcome == "fired"
    s = dq.schedule("o")
    assert (s.runs, s.skipped) == (2, 1)


def test_overlap_buffer_one_fires_the_buffered_tick_when_free(dq):
    """overlap=buffer_one: one tick that came while busy is kept and fires (with its own tick
    time) once the previous message is acked; further ones are skipped."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("b", topic="jobs", every=60, catchup_window=7200, overlap="buffer_one")
    base = dq.server_ms() // 60_000 * 60_000 - 10 * 60_000
    rewind(dq, "b", base)
    dq.tick_schedule("b")
    rewind(dq, "b", base + 60_000)
    assert dq.tick_schedule("b").outcome == "buffered"
    rewind(dq, "b", base + 120_000)
    assert dq.tick_schedule("b").outcome == "skipped"     # still busy, one already buffered
    first = drain(dq, "jobs")
    r = dq.tick_schedule("b")
    assert (r.outcome, r.tick_ms) == ("fired", base + 60_000)
    [second] = drain(dq, "jobs")
    assert second.message.key == f"schedule:b:{base + 60_000}" and len(first) == 1


def test_max_runs_ends_the_schedule(dq):
    """After max_runs fired ticks the schedule ends: no next tick, nothing more fires."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("twice", topic="jobs", every=60, catchup_window=7200, max_runs=2)
    base = dq.server_ms() // 60_000 * 60_000 - 10 * 60_000
    rewind(dq, "twice", base)
    assert dq.tick_schedule("twice").outcome == "fired"
    r = dq.tick_schedule("twice")
    assert r.outcome == "fired" and r.next_ms is None
    assert dq.tick_schedule("twice").outcome == "idle"
    s = dq.schedule("twice")
    assert (s.state, s.runs, s.next_ms) == ("ended", 2, None)


def test_start_in_the_future_is_the_first_tick(dq):
    """With start= set, the first tick is the start."""
    dq.configure_topic("jobs")
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    s = dq.upsert_schedule("later", topic="jobs", every=3600, start=start, end=start + timedelta(hours=2))
    assert s.next_times(5) == [int(start.timestamp() * 1000) + k * HOUR for k in range(3)]


def test_jitter_delays_the_message_by_the_same_amount_everywhere(dq):
    """jitter: the message is due tick + (sha1 of name:tick mod jitter), whoever fires it."""
    dq.configure_topic("jobs")
    dq.upsert_schedule("j", topic="jobs", every=3600, catchup_window=7200, jitter=7200)
    tick = this_hour(dq)
    rewind(dq, "j", tick)
    r = dq.tick_schedule("j")
    expected = tick + int(hashlib.sha1(f"j:{tick}".encode()).hexdigest()[:8], 16) % 7_200_001
    m = dq.get("jobs", r.message_id)
    assert m.due_at == datetime.fromtimestamp(max(expected, m.created_at.timestamp() * 1000) / 1000, UTC)
