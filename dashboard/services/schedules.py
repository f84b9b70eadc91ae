"""Schedules for the Schedules page and its actions: DelayQueue's schedule operations, with rows
shaped for the page (times as datetimes, the expression in words, the next fire times)."""

from datetime import UTC, datetime, timedelta

from queue_core import InvalidArgument, ScheduleNotFound, StateConflict
from queue_core.engine.schedules import validate_schedule_name

from .engine import get_queue

NEXT_SHOWN = 5      # next fire times per schedule on the page
ACTIONS = ("pause", "resume", "run", "delete")


def _when(ms: int | None) -> datetime | None:
    """A stored time as a datetime; None when absent or beyond what datetime holds (a schedule
    written before the engine capped its intervals must not take the page down)."""
    if ms is None:
        return None
    try:   # exact: through a float, a whole-second tick could come back 1 ms early (a review found it)
        return _EPOCH + timedelta(milliseconds=ms)
    except (OverflowError, OSError, ValueError):
        return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def matches(row: dict, search: str) -> bool:
    """The page's filter: ``search`` in the schedule's name or topic (any case)."""
    needle = search.lower()
    return needle in row["name"].lower() or needle in row["topic"].lower()


def schedules(search: str = "", *, page: int = 1, per_page: int | None = None) -> list[dict]:
    """The schedules matching ``search`` (all when empty), sorted by name, ``per_page`` to a page
    (all when None), as rows: name, topic, state, expression in words, next NEXT_SHOWN fire times,
    counters, the pause note, and the last 20 ticks (newest first), each fired one with where its
    message is now (``message_state``: a state, or "done" once acked or removed). Cost: the
    registry (HSCAN of names only), then two pipelined round trips for the page's schedules
    (DelayQueue.schedules, tick_states). ``matching_count(search)`` says how many match."""
    names = _matching_names(search)
    if per_page is not None:
        names = names[(page - 1) * per_page:page * per_page]
    return _rows(names)


def schedule_page(search: str = "", *, after: str | None = None, limit: int = 50,
                  shown=lambda topic: True) -> tuple[list[dict], str | None]:
    """The JSON API's page: up to ``limit`` rows (as ``schedules()``) of the schedules matching
    ``search`` whose topic ``shown`` accepts, by name after ``after``, and the cursor of the next
    page (the last name here; None at the end). A name cursor holds its place when schedules are
    added or deleted meanwhile: nothing is listed twice or skipped. InvalidArgument for a cursor
    no schedule could be named. Cost as ``schedules()``: the registry's names, then the page."""
    if after is not None:
        try:
            validate_schedule_name(after)
        except InvalidArgument:
            raise InvalidArgument("after: not a cursor from this API; pass the previous answer's \"next\" "
                                  "(or leave it out for the first page)") from None
    names = [n for n in _matching_names(search, shown) if after is None or n > after]
    page = names[:limit]
    return _rows(page), page[-1] if len(names) > limit else None


def _rows(names: list[str]) -> list[dict]:
    q = get_queue()
    found = q.schedules(names=names)
    states = q.tick_states(found)
    rows = []
    for s in found:
        rows.append({
            "name": s.name, "topic": s.topic, "state": s.state, "words": s.description,
            "expression": s.cron if s.cron else f"every {s.every:g} s", "tz": s.tz, "overlap": s.overlap,
            "catchup_window": s.catchup_window, "jitter": s.jitter, "max_runs": s.max_runs,
            "next": [_when(t) for t in s.next_times(NEXT_SHOWN)] if not s.paused else [],
            "runs": s.runs, "missed": s.missed, "skipped": s.skipped,
            "paused": {**s.paused, "at": _when(s.paused["at"])} if s.paused else None,
            "ticks": [{"tick": _when(t.tick_ms), "outcome": t.outcome, "message_id": t.message_id,
                       "message_state": (states.get(t.message_id) or "done") if t.message_id else None,
                       "late_ms": t.late_ms, "count": t.count} for t in s.ticks],
        })
    return rows


def act_on_schedule(name: str, action: str, *, note: str = "", actor: str = "") -> str:
    """Pause (with ``note``), resume, run now or delete the schedule ``name``; returns what
    happened in words. Raises ScheduleNotFound, InvalidArgument or Unavailable."""
    q = get_queue()
    if action == "pause":
        q.pause_schedule(name, note=note, actor=actor or None)
        return f"Schedule {name} paused: it fires nothing until resumed."
    if action == "resume":
        nxt = q.resume_schedule(name)
        return f"Schedule {name} resumed; next tick {_when(nxt):%Y-%m-%d %H:%M:%S} UTC." if nxt else \
            f"Schedule {name} resumed; it has no more ticks."
    if action == "run":
        msg_id = q.run_schedule_now(name, actor=actor or None)
        return f"Schedule {name} ran now: message {msg_id}."
    if action == "delete":
        if not q.delete_schedule(name):
            raise ScheduleNotFound(f"no schedule named {name!r}")
        return f"Schedule {name} deleted (the messages it published stay)."
    raise ValueError(f"unknown schedule action {action!r}")


def _matching_names(search: str, shown=lambda topic: True) -> list[str]:
    index = get_queue().schedule_index()
    return sorted(n for n, (topic, _p) in index.items()
                  if shown(topic) and (not search or matches({"name": n, "topic": topic}, search)))


def matching_count(search: str = "") -> int:
    """How many schedules ``search`` matches (the registry only)."""
    return len(_matching_names(search))


def act_on_matching(search: str, action: str, *, note: str = "", actor: str = "") -> tuple[list[str], list[str]]:
    """Pause (the active ones) or resume (the paused ones) every schedule matching ``search``:
    (names acted on, names that vanished meanwhile). One engine call per schedule."""
    q = get_queue()
    wanted = "active" if action == "pause" else "paused"
    done, gone = [], []
    for s in q.schedules():
        if s.state != wanted or (search and not matches({"name": s.name, "topic": s.topic}, search)):
            continue
        try:
            if action == "pause":
                q.pause_schedule(s.name, note=note, actor=actor or None)
            else:
                q.resume_schedule(s.name)
            done.append(s.name)
        except ScheduleNotFound:
            gone.append(s.name)
    return done, gone


EDITABLE = ("cron", "every", "tz", "overlap", "catchup_window", "jitter", "max_runs")


def editable(name: str) -> dict:
    """The fields of ``name`` the edit form changes (its timing and rules; never the payload)."""
    s = get_queue().schedule(name)
    return {"cron": s.cron or "", "every": s.every, "tz": s.tz, "overlap": s.overlap,
            "catchup_window": s.catchup_window, "jitter": s.jitter, "max_runs": s.max_runs, "topic": s.topic}


def edit_schedule(name: str, *, cron: str | None, every: float | None, tz: str, overlap: str,
                  catchup_window: float, jitter: float, max_runs: int) -> dict:
    """Replace the timing and rules of ``name``, keeping its topic, payload, headers, bounds,
    counters and recent ticks; returns the fields before the change. Raises InvalidArgument
    naming the field, or ScheduleNotFound."""
    q = get_queue()
    s = q.schedule(name)
    before = editable(name)
    q.upsert_schedule(name, topic=s.topic, cron=cron, every=every, tz=tz, payload=s.payload, headers=s.headers,
                      start=_when(s.start_ms) if s.start_ms else None, end=_when(s.end_ms) if s.end_ms else None,
                      max_runs=max_runs, catchup_window=catchup_window, overlap=overlap, jitter=jitter,
                      max_attempts=s.max_attempts)
    return before


# Ticks one backfill operation may publish: a day of a 1-second schedule is 86,400. Counting them
# for the preview is arithmetic for every= and one cron step each for cron (~1.5 s for 100,000 of
# a every-second cron, the most a preview costs).
BACKFILL_MAX_TICKS = 100_000
BACKFILL_SHOWN = 5       # tick times the preview lists


def timing_words(s) -> str:
    """What decides a schedule's tick times, as text: a backfill's frozen scope keeps it, and its
    operation stops if the schedule was retimed since the preview."""
    return f"cron={s.cron or ''} every={s.every or ''} tz={s.tz} start={s.start_ms} end={s.end_ms}"


def _ms(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(milliseconds=1)   # exact (a float can land 1 ms short)


def backfill_preview(name: str, start: datetime, end: datetime) -> dict:
    """What backfilling ``name`` over [start, end] (aware) would publish: {"topic", "count",
    "first": the first BACKFILL_SHOWN tick times, "words", "scope": the frozen scope its operation
    runs on}. Raises InvalidArgument naming the field (end before start or after Redis's now, more
    than BACKFILL_MAX_TICKS ticks) or ScheduleNotFound. Two round trips, then the tick count."""
    q = get_queue()
    s = q.schedule(name)
    start_ms, end_ms = _ms(start), _ms(end)
    if end_ms < start_ms:
        raise InvalidArgument("to: the end of the range is before its start")
    if end_ms > q.server_ms():
        raise InvalidArgument("to: the end is in the future; a backfill fills past ticks (the schedulers fire the "
                              "next ones)")
    count = s.timing.count(start_ms - 1, end_ms, cap=BACKFILL_MAX_TICKS)
    if count > BACKFILL_MAX_TICKS:
        raise InvalidArgument(f"the range holds more than {BACKFILL_MAX_TICKS:,} ticks of {name}; narrow it (or "
                              "backfill it in several parts)")
    first = [t for t, _ in zip(s.timing.times(start_ms - 1), range(min(count, BACKFILL_SHOWN)), strict=False)]
    return {"topic": s.topic, "count": count, "first": [_when(t) for t in first], "words": s.description,
            "scope": {"schedule": name, "from_ms": start_ms, "to_ms": end_ms, "ticks": count,
                      "timing": timing_words(s)}}


def backfill_scope_holds(name: str, topic: str, scope: dict) -> bool:
    """Whether ``name`` still lives on ``topic`` with the timing a backfill's scope recorded, so
    its range holds the ticks the preview counted. One round trip (two with the registry);
    ScheduleNotFound when it is gone."""
    s = get_queue().schedule(name)
    return s.topic == topic and timing_words(s) == scope["timing"]


def backfill_batch(topic: str, scope: dict, run) -> tuple[int, int]:
    """One batch of a backfill operation: the next ``run.size`` ticks of the scope's range after
    ``run.after`` (the last tick done, which the operation keeps across resumes), each published
    unless its message is still there. Returns (ticks, published); ``run.after`` is None once the
    range is done. StateConflict when the schedule was deleted, or moved or retimed since the
    preview (its ticks would no longer be the ones previewed)."""
    name = scope["schedule"]
    try:
        holds = backfill_scope_holds(name, topic, scope)
    except ScheduleNotFound:
        raise StateConflict(f"schedule {name} was deleted during its backfill; the ticks published so far "
                            "stay") from None
    if not holds:
        raise StateConflict(f"schedule {name} was moved or retimed since the preview, so its ticks are no "
                            "longer the ones previewed; the ticks published so far stay: preview the backfill "
                            "again")
    start_ms = int(run.after) + 1 if run.after else scope["from_ms"]
    done = get_queue().backfill_schedule(name, _when(start_ms), _when(scope["to_ms"]), limit=run.size,
                                         partial=True, actor=run.actor)
    run.after = str(done.ticks[-1]) if done.rest_ms is not None else None
    return len(done.ticks), len(done.published)


def schedule_topic(name: str) -> str:
    """The topic of schedule ``name`` (ScheduleNotFound when there is none)."""
    return get_queue().schedule(name).topic


__all__ = ["ACTIONS", "BACKFILL_MAX_TICKS", "EDITABLE", "NEXT_SHOWN", "backfill_batch", "backfill_preview",
           "backfill_scope_holds", "ScheduleNotFound", "act_on_matching", "act_on_schedule",
           "edit_schedule", "editable", "matches", "matching_count", "schedule_page",
           "schedule_topic", "schedules"]
