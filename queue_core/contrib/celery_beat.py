"""Celery beat without the singleton: an app's ``beat_schedule`` (crontab and timedelta entries, args,
kwargs, options) becomes delayq schedules, fired exactly once by any number of schedulers and
handed to the broker by the bridge's forwarder like any delayed task.

    DelayqScheduling(app, url=...).import_beat_schedule()     # or: delayq celery-beat --app mysite.celery:app

Each entry ``E`` is the schedule ``celery-beat:E`` on the topic of its task's queue
(``celery.<queue>``). Its payload is one bridge record of the task message, signed for the
schedule (``schedule:celery-beat:E``), so every tick publishes the same record under its own dedup
key ``schedule:celery-beat:E:<tick>`` and the forwarder gives each tick a task id of its own (a
UUID derived from the tick's message id, so a repeated forward runs once). A crontab runs in the
app's ``timezone`` (UTC when unset); ``expires`` in an entry's options is not kept (it would be
fixed at import, not counted from each tick). Entries named ``celery-beat:*`` that are no longer in
the beat schedule are deleted on import, so one call keeps delayq in step with the code.
"""

from datetime import timedelta

from ..keys import validate_topic
from .celery_bridge import FORWARD_RETRY, _canonical

BEAT_PREFIX = "celery-beat:"


def cron_of(entry) -> str:
    """A celery ``crontab`` as a cron expression (minute hour day-of-month month day-of-week)."""
    return " ".join(str(getattr(entry, f"_orig_{f}")) for f in
                    ("minute", "hour", "day_of_month", "month_of_year", "day_of_week"))


def timing_of(app, schedule) -> dict:
    """upsert_schedule's timing arguments for a beat entry's ``schedule``: a crontab, a
    ``celery.schedules.schedule``, a timedelta or a number of seconds. ValueError for others
    (solar schedules, custom classes)."""
    from celery.schedules import crontab
    from celery.schedules import schedule as every_schedule

    if isinstance(schedule, crontab):
        return {"cron": cron_of(schedule), "tz": str(app.conf.timezone or "UTC")}
    if isinstance(schedule, every_schedule):
        schedule = schedule.run_every
    if isinstance(schedule, timedelta):
        return {"every": schedule.total_seconds()}
    if isinstance(schedule, int | float) and not isinstance(schedule, bool):
        return {"every": float(schedule)}
    raise ValueError(f"beat schedule {schedule!r}: delayq runs crontab and interval (timedelta or seconds) "
                     "entries; keep this one in celery beat or express it as a crontab")


def schedule_periodic(bridge, name: str, task: str, schedule, args=(), kwargs=None, options=None):
    """The periodic task ``task`` as the delayq schedule ``celery-beat:<name>``; returns it."""
    options = {k: v for k, v in (options or {}).items() if k != "expires"}
    schedule_name = f"{BEAT_PREFIX}{name}"
    message = bridge.app.amqp.as_task_v2("periodic", task, args=tuple(args or ()), kwargs=dict(kwargs or {}))
    topic, record = bridge.record(task, message, options)
    record["periodic"] = schedule_name
    bridge.sign(topic, f"schedule:{schedule_name}", record)
    q = bridge.queue
    if not q.is_configured(validate_topic(topic)):   # as the forwarder does for a topic it creates
        q.configure_topic(topic, retry=FORWARD_RETRY)
    return q.upsert_schedule(schedule_name, topic=topic, payload=_canonical(record), headers={"task": task},
                             **timing_of(bridge.app, schedule))


def import_beat_schedule(bridge, beat_schedule: dict | None = None) -> list:
    """Every entry of ``beat_schedule`` (default: the app's) as a delayq schedule; entries named
    ``celery-beat:*`` that are gone from it are deleted. Returns the schedules."""
    entries = bridge.app.conf.beat_schedule if beat_schedule is None else beat_schedule
    done = []
    for name, entry in (entries or {}).items():
        done.append(schedule_periodic(bridge, name, entry["task"], entry["schedule"], entry.get("args", ()),
                                      entry.get("kwargs"), entry.get("options")))
    wanted = {f"{BEAT_PREFIX}{name}" for name in entries or {}}
    for s in bridge.queue.schedules():
        if s.name.startswith(BEAT_PREFIX) and s.name not in wanted:
            bridge.queue.delete_schedule(s.name)
    return done
