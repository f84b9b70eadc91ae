"""Celery beat without the singleton (queue_core.contrib.celery_beat): beat_schedule entries as delayq
schedules, fired by two schedulers at once and forwarded to a real Celery worker, each tick once."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from celery.schedules import crontab

from queue_core import DelayQueue, Reject
from queue_core.contrib.celery_beat import cron_of, timing_of
from queue_core.scheduler import Scheduler
from tests.celery_bridge.conftest import ROOT, TOPIC, runs
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


def test_the_readme_migration_from_celery_beat_runs_as_written(bridge, redis_url, monkeypatch):
    """The README's lines that replace `celery beat`, run as written (the app's name swapped for
    this test app's, `celery-beat` twice "for safety"): the app's beat_schedule reaches a real
    Celery worker through the forwarder, each tick once."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("Moving from `celery beat`:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in block.splitlines() if line.startswith(("delayq ", "celery "))]
    assert [c[:2] for c in commands] == [["delayq", "celery-beat"], ["delayq", "celery-forwarder"],
                                         ["celery", "-A"]], block
    monkeypatch.setenv("BRIDGE_BEAT_EVERY", "0.5")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bin_dir = Path(sys.executable).parent
    module, start, q, _broker = bridge
    start("worker")            # `celery -A mysite worker`, as the fixture starts it (threads, quiet)
    procs = []
    try:
        for command in (commands[0], commands[0], commands[1]):
            args = [str(bin_dir / "delayq"), *(a.replace("mysite.celery:app", "tests.celery_bridge.app:app")
                                               for a in command[1:])]
            procs.append(subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))
        wait_for(lambda: len(runs(q)) >= 4, 60, "four ticks of the periodic task ran")
        q.pause_schedule("celery-beat:record")
        fired = q.schedule("celery-beat:record").runs
        wait_for(lambda: len(runs(q)) == fired, 30, "every fired tick ran")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert all(proc.returncode in (0, -15) for proc in procs), [p.stderr.read()[-2000:] for p in procs]
    assert {r.split("|")[0] for r in runs(q)} == {"7"} and q.counts(TOPIC)["dead"] == 0
    assert len(runs(q)) == fired >= 4


def test_the_standalone_sites_periodic_tasks_need_no_beat_process(redis_url):
    """./scripts/run starts `delayq celery-beat --app config.celery:app` instead of `celery beat`
    (config/devrun.py): the site's own periodic tasks (resume stalled operations, archive, alerts,
    nightly analytics) become delayq schedules on its Celery bridge topic and tick."""
    import inspect

    import config.devrun

    source = inspect.getsource(config.devrun)
    assert '"celery-beat",' in source and '"beat"' not in source      # delayq's, and no Celery beat process
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "config.settings_test",
           "DELAYQ_REDIS_URL": redis_url, "REDIS_URL": redis_url}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "delayq"), "celery-beat", "--app", "config.celery:app"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q = DelayQueue.from_url(redis_url)
    names = {"celery-beat:delayq-resume-stalled-operations", "celery-beat:delayq-archive-events",
             "celery-beat:delayq-evaluate-alerts", "celery-beat:delayq-deliver-alerts",
             "celery-beat:delayq-nightly-analytics"}
    try:
        wait_for(lambda: proc.poll() is None and {s.name for s in q.schedules()} >= names, 60, "the site's schedules")
        # The archive task every 5 s: a tick is fired and waits in the bridge topic for the forwarder.
        wait_for(lambda: q.schedule("celery-beat:delayq-archive-events").runs >= 1, 30, "an archive tick")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    nightly = q.schedule("celery-beat:delayq-nightly-analytics")
    assert (nightly.cron, nightly.topic.startswith("celery.")) == ("17 3 * * *", True), err[-2000:]
    assert q.schedule("celery-beat:delayq-archive-events").every == 5.0
