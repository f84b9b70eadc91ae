"""Schedules in real processes: three `delayq scheduler` processes with a SIGKILL, the `delayq
schedule` commands, `delayq worker --schedules`, and a Redis restart from its AOF."""

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from queue_core import DelayQueue

from .helpers import drain, poll, rewind, this_hour

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_refused_tick_is_retried_later_not_in_a_tight_loop(redis_url, caplog):
    """A tick publish refuses (payload over the topic's cap): the scheduler says why and waits
    seconds before trying again, instead of spinning on the due schedule."""
    from queue_core.scheduler import REFUSED_RETRY_MS, Scheduler

    q = DelayQueue.from_url(redis_url)
    q.configure_topic("small")
    q.upsert_schedule("big", topic="small", every=3600, catchup_window=7200, payload="x" * 2000)
    q.configure_topic("small", max_payload_bytes=1000)
    rewind(q, "big", this_hour(q))
    scheduler = Scheduler(q)
    assert scheduler.loop_once() >= 0.9 * min(scheduler.max_sleep, REFUSED_RETRY_MS / 1000)
    assert "its tick was refused by publish" in caplog.text
    assert scheduler.loop_once() >= 0.5                     # still waiting: no second try yet
    assert caplog.text.count("its tick was refused") == 1 and q.schedule("big").runs == 0
