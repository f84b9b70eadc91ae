"""Celery beat without the singleton (queue_core.contrib.celery_beat): beat_schedule entries as delayq
schedules, fired by two schedulers at once and forwarded to a real Celery worker, each tick once."""

from datetime import timedelta

import pytest
from celery.schedules import crontab

from queue_core import DelayQueue, Reject
from queue_core.contrib.celery_beat import cron_of, timing_of
from queue_core.scheduler import Scheduler
from tests.celery_bridge.conftest import TOPIC, runs
from tests.conftest import wait_for


def test_crontab_and_interval_entries_become_schedule_timings(bridge):
    module = bridge[0]
    assert cron_of(crontab(minute="*/15", hour=3, day_of_week="mon-fri")) == "*/15 3 * * mon-fri"
    module.app.conf.timezone = "Europe/Berlin"
    assert timing_of(module.app, crontab(minute=0, hour=3)) == {"cron": "0 3 * * *", "tz": "Europe/Berlin"}
    assert timing_of(module.app, timedelta(minutes=5)) == {"every": 300.0} == timing_of(module.app, 300)
    with pytest.raises(ValueError, match="crontab and interval"):
        timing_of(module.app, "every morning")


def test_periodic_tasks_run_once_per_tick_with_two_schedulers(bridge, redis_url):
    """Two schedulers race on every tick of a 0.5 s periodic task; each tick reaches the Celery
    worker once, with a task id of its own, and the import is idempotent."""
    module, start, q, broker = bridge
    module.app.conf.beat_schedule = {"record": {"task": "bridge.record", "schedule": timedelta(seconds=0.5),
                                                "args": (9, 0)}}
    scheduling = module.app.delayq_scheduling
    [s] = scheduling.import_beat_schedule()
    assert (s.name, s.topic, s.every) == ("celery-beat:record", TOPIC, 0.5)
    assert [x.name for x in scheduling.import_beat_schedule()] == ["celery-beat:record"]
    start("worker")
    start("forwarder")
    schedulers = [Scheduler(DelayQueue.from_url(redis_url)) for _ in range(2)]
    for sch in schedulers:
        sch.start()
    try:
        wait_for(lambda: len(runs(q)) >= 4, 60, "four ticks ran")
    finally:
        q.pause_schedule("celery-beat:record")
        for sch in schedulers:
            sch.stop()
        for sch in schedulers:
            sch.join(10)
    fired = q.schedule("celery-beat:record").runs
    wait_for(lambda: len(runs(q)) == fired, 30, "every fired tick ran")
    assert {r.split("|")[0] for r in runs(q)} == {"9"}
    assert q.counts(TOPIC)["dead"] == 0
    # The beat schedule emptied: the import deletes what it put there.
    module.app.conf.beat_schedule = {}
    assert scheduling.import_beat_schedule() == [] and q.schedules() == []


def test_a_periodic_record_outside_its_schedule_is_refused(bridge):
    """The record is signed for its schedule's ticks: published under another key, it goes dead."""
    module, _start, q, _broker = bridge
    scheduling = module.app.delayq_scheduling
    scheduling.schedule_periodic("r", "bridge.record", 60, args=(1, 0))
    record = q.schedule("celery-beat:r").payload
    forged = q.publish(TOPIC, record, key="some-task-id:0")
    with pytest.raises(Reject, match="outside its schedule"):
        scheduling.verified_record(q.get(TOPIC, forged))
    ticked = q.publish(TOPIC, record, key="schedule:celery-beat:r:123")
    assert scheduling.verified_record(q.get(TOPIC, ticked))["periodic"] == "celery-beat:r"
