"""Schedules (engine/schedules.py, lua/schedule_tick.lua, cron.py, scheduler.py): fire times with
time zones and DST, exactly-once ticks under races, catch-up, overlap, bounds, and real scheduler
processes with a SIGKILL."""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from queue_core import DelayQueue, InvalidArgument, ScheduleNotFound
from queue_core.cron import Cron, Timing, zone

from .helpers import poll

ROOT = Path(__file__).resolve().parents[2]
BERLIN = zone("Europe/Berlin")
HOUR = 3_600_000


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


# -- fire times: cron, time zones, DST (no Redis) -------------------------------------------------

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


# -- the engine -----------------------------------------------------------------------------------

def rewind(dq, name: str, to_ms: int) -> None:
    """Leave the schedule as a scheduler outage leaves it: its stored next tick at ``to_ms``."""
    s = dq.schedule(name)
    pk = dq.keys(s.topic, s.partition).p
    dq.redis.hset(pk.schedule_runs, f"{name}|next", to_ms)
    dq.redis.zadd(pk.schedule_due, {name: to_ms})


def this_hour(dq) -> int:
    return dq.server_ms() // HOUR * HOUR


def drain(dq, topic: str) -> list:
    out = []
    while batch := dq.claim(topic, 100):
        out += batch
        dq.ack_many(batch)
    return out


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


# -- scheduler processes --------------------------------------------------------------------------

def _scheduler(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "queue_core", "scheduler", "--url", url], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_three_scheduler_processes_and_a_sigkill_fire_every_tick_once(redis_url):
    """40 schedules every 0.2 s, three `delayq scheduler` processes for ~10 s, one SIGKILLed and
    restarted: every tick in the run is published exactly once (no gap, no duplicate), none missed."""
    q = DelayQueue.from_url(redis_url)
    q.configure_topic("ticks", partitions=3)
    names = [f"s{i}" for i in range(40)]
    for name in names:
        q.upsert_schedule(name, topic="ticks", every=0.2, catchup_window=30)
    procs = [_scheduler(redis_url) for _ in range(3)]
    try:
        poll(lambda: q.schedule("s0").runs >= 5, timeout=20)
        steady = q.server_ms()     # lateness counts from here: the first ticks waited for Python to start
        time.sleep(3)   # a stretch of racing before the kill (the run's length, not a wait for an event)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        time.sleep(2)
        procs[0] = _scheduler(redis_url)
        time.sleep(3)
        for name in names:
            q.pause_schedule(name)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        errors = [p.communicate(timeout=20)[1].decode() for p in procs]
    assert all(p.returncode in (0, -signal.SIGTERM) for p in procs[1:]), errors
    ticks = defaultdict(list)
    lateness = []
    for d in drain(q, "ticks"):
        ticks[d.message.headers["delayq-schedule"]].append(int(d.message.headers["delayq-tick"]))
        tick = int(d.message.headers["delayq-tick"])
        if tick >= steady:
            lateness.append(d.message.created_at.timestamp() * 1000 - tick)
    total = 0
    for name in names:
        got = sorted(ticks[name])
        assert len(got) == len(set(got)), f"{name}: a tick was published twice"
        assert got == list(range(got[0], got[-1] + 1, 200)), f"{name}: a tick is missing"
        s = q.schedule(name)
        assert s.missed == 0 and s.runs == len(got)
        total += len(got)
    assert total >= 40 * 30
    lateness.sort()
    p99 = lateness[int(len(lateness) * 0.99)]
    print(f"\n{total} ticks, lateness p50 {lateness[len(lateness) // 2]:.0f} ms, p99 {p99:.0f} ms, "
          f"max {lateness[-1]:.0f} ms")
    assert p99 < 1000


def _cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queue_core", *args, "--url", url], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_schedule_commands_add_list_pause_run_resume_delete(redis_url):
    """`delayq schedule ...` as users type it; bad input is one clear line and exit code 2."""
    q = DelayQueue.from_url(redis_url)
    q.configure_topic("reports")
    added = _cli(redis_url, "schedule", "add", "nightly-report", "--topic", "reports", "--cron", "0 3 * * *",
                 "--tz", "Europe/Berlin", "--payload", '{"kind":"nightly"}')
    assert added.returncode == 0 and "Every day at 03:00 Europe/Berlin; next tick" in added.stdout, added.stderr
    listed = _cli(redis_url, "schedule", "list")
    assert "nightly-report  [active]  -> reports  Every day at 03:00 Europe/Berlin" in listed.stdout
    [next_line] = [line for line in listed.stdout.splitlines() if line.strip().startswith("next:")]
    assert next_line.count("+00:00") == 3 and ("T01:00:00" in next_line or "T02:00:00" in next_line)
    assert _cli(redis_url, "schedule", "pause", "nightly-report", "--note", "window").returncode == 0
    assert '"paused_note": "window"' in _cli(redis_url, "schedule", "list", "--json").stdout
    msg_id = _cli(redis_url, "schedule", "run", "nightly-report").stdout.strip()
    assert q.get("reports", msg_id).payload == b'{"kind":"nightly"}'
    assert "resumed; next tick" in _cli(redis_url, "schedule", "resume", "nightly-report").stdout
    planned = _cli(redis_url, "schedule", "backfill", "nightly-report", "--from", "2026-01-05T00:00:00+00:00",
                   "--to", "2026-01-10T00:00:00+00:00", "--dry-run")
    assert planned.stdout.startswith("nightly-report: 5 tick(s) in the range, 2026-01-05T02:00:00+00:00"), planned
    assert _cli(redis_url, "schedule", "delete", "nightly-report").returncode == 0
    bad = _cli(redis_url, "schedule", "add", "x", "--topic", "reports", "--cron", "0 3 * * *", "--tz", "Nowhere/City")
    assert bad.returncode == 2 and bad.stderr.strip() == ("error: tz: unknown time zone 'Nowhere/City'; use an IANA "
                                                          "name such as 'Europe/Berlin' or 'UTC'")
    assert q.schedules() == []


def test_a_worker_with_the_schedules_flag_fires_ticks_itself(redis_url):
    """`delayq worker --schedules`: no scheduler process, and the worker handles the ticks it fired."""
    q = DelayQueue.from_url(redis_url)
    q.configure_topic("jobs")
    q.upsert_schedule("tick", topic="jobs", every=0.2)
    env = {**os.environ, "TEST_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "queue_core", "worker", "--url", redis_url, "--topic", "jobs",
                             "--handler", "tests.queue_core.handlers:record", "--schedules"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: q.redis.llen("test:handled") >= 3 or proc.poll() is not None, timeout=20)
        assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert q.schedule("tick").runs >= 3


def test_a_schedule_survives_a_redis_restart_from_its_aof(tmp_path):
    """Its state is Redis only: stopped and started again on the same AOF, the schedule keeps its
    definition, counters and next tick, and its next due tick fires once."""
    from queue_core.contrib import localserver

    server = localserver.start(data_dir=tmp_path, appendonly=True)
    try:
        q = DelayQueue.from_url(server.url)
        q.configure_topic("jobs")
        q.upsert_schedule("nightly", topic="jobs", cron="0 3 * * *", tz="Europe/Berlin", payload="p")
        q.upsert_schedule("hourly", topic="jobs", every=3600, catchup_window=7200)
        rewind(q, "hourly", this_hour(q))
        assert q.tick_schedule("hourly").outcome == "fired"
        before = {s.name: (s.description, s.next_ms, s.runs, s.last_tick_ms) for s in q.schedules()}
        port = server.port
        server.stop()
        server = localserver.start(data_dir=tmp_path, appendonly=True, port=port)
        q = DelayQueue.from_url(server.url)
        assert {s.name: (s.description, s.next_ms, s.runs, s.last_tick_ms) for s in q.schedules()} == before
        fired = before["hourly"][3]
        rewind(q, "hourly", fired)                 # pointed at the fired tick again: it does not fire twice
        r = q.tick_schedule("hourly")
        assert not (r.outcome == "fired" and r.tick_ms == fired)
        assert [d.message.headers["delayq-tick"] for d in drain(q, "jobs")].count(str(fired)) == 1
    finally:
        server.stop()
