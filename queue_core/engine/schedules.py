"""Schedules as data: ``upsert_schedule``, ``schedule``, ``schedules``, ``pause_schedule``,
``resume_schedule``, ``delete_schedule`` and ``tick_states`` (plain commands; firing ticks is
ticks.py, with lua/schedule_tick.lua).

A schedule lives in one partition of its topic (its *home*: the name's hash over the partitions,
so schedules spread over cluster shards), in three keys of that partition (keys.py:
``schedules``, ``schedule_due``, ``schedule_runs``), plus one line in a registry hash outside any
hash tag that says where each name lives. Fire times are computed by queue_core.cron; which tick
fires, and its publish, are decided inside one script call by Redis ``TIME`` (ticks.py).
"""

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..cron import MIN_EVERY_MS, Cron, Timing, zone
from ..errors import InvalidArgument, QueueError
from ..indexes import MAX_ENTRIES, declared, entries_text, entry_count
from ..keys import (
    _crc16,
    partition_of,
    schedules_registry_key,
    schedules_version_key,
    validate_topic,
)
from ..states import ALL_STATES
from ..steps import cmd, operation, pipeline
from .base import EngineBase, as_text, to_bytes

NAME_RULE = "1-200 characters: a letter or digit first, then letters, digits, '.', '_', ':' or '-'"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
OVERLAP = ("allow", "skip", "buffer_one")
DEFAULT_CATCHUP = 60.0     # seconds
HISTORY_FIELDS = ("next", "runs", "missed", "skipped", "last_tick", "last_id", "ticks", "buffered", "paused")


class ScheduleNotFound(QueueError, KeyError):
    """No schedule with that name exists."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def validate_schedule_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        shown = name if not isinstance(name, str) or len(name) <= 40 else name[:40] + "..."
        raise InvalidArgument(f"invalid schedule name {shown!r}: schedule names are {NAME_RULE}")
    return name


@dataclass(frozen=True)
class Tick:
    """One line of a schedule's recent ticks: outcome fired, run-now, skipped (overlap),
    buffered, or missed (older than the catch-up window when a scheduler got to it)."""

    tick_ms: int
    outcome: str
    message_id: str | None
    late_ms: int
    count: int = 1     # missed: the ticks this line stands for (a long outage is one line, its last tick)


@dataclass(frozen=True)
class Schedule:
    """A schedule's definition and state, as ``schedules()`` returns it."""

    name: str
    topic: str
    partition: int
    cron: str | None
    tz: str
    every: float | None
    payload: bytes
    headers: dict | None
    start_ms: int
    end_ms: int
    max_runs: int
    catchup_window: float
    overlap: str
    jitter: float
    max_attempts: int | None
    next_ms: int | None
    look_ms: int | None          # when a scheduler looks next (None: paused or ended)
    runs: int = 0
    missed: int = 0
    skipped: int = 0
    last_tick_ms: int | None = None
    last_message_id: str | None = None
    paused: dict | None = None   # {"at": ms, "actor": ..., "note": ...}
    ticks: list[Tick] = field(default_factory=list)

    @property
    def timing(self) -> Timing:
        return _timing(self.cron, self.tz, self.every, self.start_ms, self.end_ms)

    @property
    def description(self) -> str:
        """The expression in words: "Weekdays at 03:00 Europe/Berlin", "Every 30 s"."""
        return self.timing.describe()

    def next_times(self, n: int = 3, after_ms: int | None = None) -> list[int]:
        """The next ``n`` fire times (ms) from the stored next tick (or after ``after_ms``)."""
        if after_ms is None:
            if self.next_ms is None:
                return []
            after_ms = self.next_ms - 1
        out = []
        try:
            for t in self.timing.times(after_ms):
                out.append(t)
                if len(out) == n:
                    break
        except (ValueError, OverflowError):
            pass   # past the year 9999 (a stored time no calendar holds): there are no more to show
        return out

    @property
    def state(self) -> str:
        return "paused" if self.paused else ("ended" if self.next_ms is None else "active")


def _timing(cron: str | None, tz: str, every: float | None, start_ms: int, end_ms: int) -> Timing:
    return Timing(Cron.parse(cron) if cron else None, zone(tz), int(round(every * 1000)) if every else 0,
                  start_ms, end_ms)


def _ms(value: datetime | None, what: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidArgument(f"{what} must be a timezone-aware datetime (got {value!r})")
    # Exact integer arithmetic: value.timestamp() * 1000 can land 1 ms short of a whole second.
    return (value - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_SECONDS = 10 * 366 * 86400   # every=, catchup_window=, jitter=: ten years at most


def _seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_SECONDS:
        # NaN fails the range too; a time beyond ten years would put next fire times past what
        # datetime (and every page showing them) can hold.
        raise InvalidArgument(f"{what} must be a number of seconds from 0 to {MAX_SECONDS:,} (ten years); "
                              f"got {value!r}")
    return float(seconds)


class Schedules(EngineBase):
    """upsert_schedule, schedule, schedules, schedule_index, pause_schedule, resume_schedule,
    delete_schedule, tick_states."""

    def _schedule_keys(self, topic: str, partition: int):
        return self.keys(topic, partition).p

    def _home(self, name: str):
        """(topic, partition) of a schedule, or ScheduleNotFound. One round trip."""
        validate_schedule_name(name)
        raw = yield cmd("hget", schedules_registry_key(self.prefix), name)
        if raw is None:
            raise ScheduleNotFound(f"no schedule named {name!r}; list them with schedules() or `delayq schedule list`")
        topic, _, p = as_text(raw).rpartition("|")
        return topic, int(p)

    def _upsert_schedule(self, name: str, *, topic: str, cron: str | None = None, every: float | timedelta | None = None,
                         tz: str = "UTC", payload: Any = b"", headers: dict | None = None,
                         start: datetime | None = None, end: datetime | None = None, max_runs: int = 0,
                         catchup_window: float | timedelta = DEFAULT_CATCHUP, overlap: str = "allow",
                         jitter: float | timedelta = 0, max_attempts: int | None = None):
        """Create or replace the schedule ``name`` (its counters and recent ticks are kept).

        Exactly one of ``cron`` (5 fields, or 6 with seconds first, in the IANA zone ``tz``) and
        ``every`` (seconds, >= 0.1; ticks line up on multiples of it from ``start``, else from the
        epoch). ``start``/``end``: aware datetimes bounding the ticks. ``max_runs``: the schedule
        ends after that many fired ticks (0 = no limit). ``catchup_window`` (seconds): a tick found
        due later than this (no scheduler ran) is skipped and counted as missed instead of fired.
        ``overlap``: ``allow``; ``skip`` (no tick while the previous tick's message waits or runs in
        the topic's default group); ``buffer_one`` (keep one such tick and fire it when the
        previous message is done). ``jitter`` (seconds): each tick's message is due up to that
        much after the tick, the same for every scheduler (a hash of name and tick). Returns the
        schedule. The topic must exist (configured or published to)."""
        validate_schedule_name(name)
        validate_topic(topic)
        if (cron is None) == (every is None):
            raise InvalidArgument("give exactly one of cron= (an expression) and every= (seconds)")
        every_s = None
        if every is not None:
            every_s = _seconds(every, "every")
            if every_s * 1000 < MIN_EVERY_MS:
                raise InvalidArgument(f"every must be at least {MIN_EVERY_MS / 1000:g} s (got {every_s:g} s)")
        if overlap not in OVERLAP:
            raise InvalidArgument(f"overlap must be one of {', '.join(OVERLAP)} (got {overlap!r})")
        if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 0:
            raise InvalidArgument(f"max_runs must be a whole number >= 0 (got {max_runs!r}; 0 = no limit)")
        if max_attempts is not None and (not isinstance(max_attempts, int) or max_attempts < 1):
            raise InvalidArgument(f"max_attempts must be a whole number >= 1 (got {max_attempts!r})")
        start_ms, end_ms = _ms(start, "start"), _ms(end, "end")
        if start_ms and end_ms and end_ms <= start_ms:
            raise InvalidArgument("end must be after start")
        timing = _timing(cron, tz, every_s, start_ms, end_ms)   # validates cron and tz
        catchup = _seconds(catchup_window, "catchup_window")
        jitter_s = _seconds(jitter, "jitter")
        body = to_bytes(payload)
        header_json = None
        if headers:
            try:
                header_json = json.dumps(headers, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"headers must be JSON-serialisable: {exc}") from exc
        if not (yield cmd("sismember", self._registry_key(), topic)):
            raise InvalidArgument(f"topic: no topic named {topic!r}; create it first with configure_topic() "
                                  "(or publish to it)")
        layout = yield from self._layout(topic, fresh=True)
        if fields := declared(layout):   # each tick writes these entries: the publish's cap holds
            n = entry_count(entries_text(fields, body, {**(headers or {}), "delayq-schedule": name}))
            if n > MAX_ENTRIES:
                raise InvalidArgument(f"payload: {n:,} values in topic {topic!r}'s indexed fields; a message may have "
                                      f"at most {MAX_ENTRIES} (each element of a list is one)")
        registry = schedules_registry_key(self.prefix)
        old = yield cmd("hget", registry, name)
        home = (topic, _crc16(name.encode()) % layout.partitions)
        if old is not None:
            old_topic, _, old_p = as_text(old).rpartition("|")
            if old_topic == topic and int(old_p) < layout.partitions:
                home = (topic, int(old_p))
            else:
                yield from self._drop_schedule(name, old_topic, int(old_p))
        definition = {"topic": topic, "cron": cron, "tz": tz, "every": every_s, "start_ms": start_ms, "end_ms": end_ms,
                      "max_runs": max_runs, "catchup_ms": int(catchup * 1000), "overlap": overlap,
                      "jitter_ms": int(jitter_s * 1000), "headers": header_json, "max_attempts": max_attempts}
        definition = {k: v for k, v in definition.items() if v is not None}
        pk = self._schedule_keys(*home)
        now = yield from self._server_ms()
        last_tick, paused = yield pipeline(lambda pipe: (pipe.hget(pk.schedule_runs, f"{name}|last_tick"),
                                                         pipe.hget(pk.schedule_runs, f"{name}|paused")))
        after = max(now, int(last_tick) if last_tick is not None else -1)
        nxt = timing.next_after(after)

        def fill(pipe):
            pipe.hset(pk.schedules, mapping={name: json.dumps(definition, separators=(",", ":")),
                                             f"{name}|payload": body})
            if nxt is None:
                pipe.hdel(pk.schedule_runs, f"{name}|next")
                pipe.zrem(pk.schedule_due, name)
            else:
                pipe.hset(pk.schedule_runs, f"{name}|next", nxt)
                if paused is None:
                    pipe.zadd(pk.schedule_due, {name: nxt})
        # The registry first, so a scheduler that sees the schedule's keys can always find its home.
        yield cmd("hset", registry, name, f"{home[0]}|{home[1]}")
        yield pipeline(fill, transaction=not self.cluster)
        yield cmd("incr", schedules_version_key(self.prefix))
        return (yield from self._schedule(name))

    upsert_schedule = operation(_upsert_schedule)

    def _drop_schedule(self, name: str, topic: str, p: int):
        pk = self._schedule_keys(topic, p)

        def fill(pipe):
            pipe.hdel(pk.schedules, name, f"{name}|payload")
            pipe.zrem(pk.schedule_due, name)
            pipe.hdel(pk.schedule_runs, *(f"{name}|{f}" for f in HISTORY_FIELDS))
        yield pipeline(fill, transaction=not self.cluster)

    def _schedule(self, name: str):
        """One schedule (ScheduleNotFound if none). Two round trips."""
        topic, p = yield from self._home(name)
        found = yield from self._read_schedules([(name, topic, p)])
        if not found:
            raise ScheduleNotFound(f"no schedule named {name!r}")
        return found[0]

    schedule = operation(_schedule)

    def _schedule_index(self):
        """{name: (topic, partition)} of every schedule, from the registry alone (HSCAN, bounded
        per call): names to filter and page before reading the schedules themselves."""
        index: dict[str, tuple[str, int]] = {}
        cursor = 0
        while True:
            cursor, chunk = yield cmd("hscan", schedules_registry_key(self.prefix), cursor, count=500)
            for name, raw in chunk.items():
                topic, _, p = as_text(raw).rpartition("|")
                index[as_text(name)] = (topic, int(p))
            if not cursor:
                return index

    schedule_index = operation(_schedule_index)

    def _schedules(self, names: list[str] | None = None):
        """Every schedule (or those named; unknown names are left out), sorted by name. The
        registry (HSCAN, or one HMGET for ``names``) and one pipelined round trip: O(schedules)."""
        if names is None:
            homes = [(n, t, p) for n, (t, p) in (yield from self._schedule_index()).items()]
        else:
            for name in names:
                validate_schedule_name(name)
            raws = (yield cmd("hmget", schedules_registry_key(self.prefix), *names)) if names else []
            homes = []
            for name, raw in zip(names, raws, strict=True):
                if raw is not None:
                    topic, _, p = as_text(raw).rpartition("|")
                    homes.append((name, topic, int(p)))
        return sorted((yield from self._read_schedules(homes)), key=lambda s: s.name)

    schedules = operation(_schedules)

    def _read_schedules(self, homes: list[tuple[str, str, int]]):
        def fill(pipe):
            for name, topic, p in homes:
                pk = self._schedule_keys(topic, p)
                pipe.hmget(pk.schedules, name, f"{name}|payload")
                pipe.hmget(pk.schedule_runs, *(f"{name}|{f}" for f in HISTORY_FIELDS))
                pipe.zscore(pk.schedule_due, name)
        replies = (yield pipeline(fill)) if homes else []
        out = []
        for i, (name, topic, p) in enumerate(homes):
            (raw, payload), runs, look = replies[3 * i:3 * i + 3]
            if raw is None:
                continue   # deleted meanwhile, or its topic was deleted
            d = json.loads(raw)
            r = dict(zip(HISTORY_FIELDS, (None if v is None else as_text(v) for v in runs), strict=True))
            ticks = []
            for line in (r["ticks"] or "").splitlines():
                tick, outcome, msg_id, late, count = line.split(" ")
                ticks.append(Tick(int(tick), outcome, None if msg_id == "-" else msg_id, int(late), int(count)))
            paused = None
            if r["paused"] is not None:
                at, actor, note = r["paused"].split("|", 2)
                paused = {"at": int(at), "actor": actor, "note": note}
            out.append(Schedule(
                name=name, topic=topic, partition=p, cron=d.get("cron"), tz=d.get("tz", "UTC"), every=d.get("every"),
                payload=payload or b"", headers=json.loads(d["headers"]) if d.get("headers") else None,
                start_ms=d.get("start_ms", 0), end_ms=d.get("end_ms", 0), max_runs=d.get("max_runs", 0),
                catchup_window=d["catchup_ms"] / 1000, overlap=d["overlap"], jitter=d.get("jitter_ms", 0) / 1000,
                max_attempts=d.get("max_attempts"), next_ms=int(r["next"]) if r["next"] else None,
                look_ms=int(look) if look is not None else None, runs=int(r["runs"] or 0),
                missed=int(r["missed"] or 0), skipped=int(r["skipped"] or 0),
                last_tick_ms=int(r["last_tick"]) if r["last_tick"] else None, last_message_id=r["last_id"],
                paused=paused, ticks=ticks))
        return out

    def _tick_states(self, schedules: list[Schedule]):
        """{message id: its state in its topic's default group, or None once it is gone (acked,
        or removed)} for the fired ticks of ``schedules`` (from ``schedules()``). One pipelined
        round trip: a ZSCORE per state per message, at most 20 messages per schedule."""
        pairs = [(s.topic, t.message_id) for s in schedules for t in s.ticks if t.message_id]
        if not pairs:
            return {}

        def fill(pipe):
            for topic, msg_id in pairs:
                k = self.keys(topic, partition_of(msg_id))
                for state in ALL_STATES:
                    pipe.zscore(k.state(state), msg_id)
        replies = yield pipeline(fill)
        n = len(ALL_STATES)
        return {msg_id: next((st.value for st, score in zip(ALL_STATES, replies[i * n:(i + 1) * n], strict=True)
                              if score is not None), None)
                for i, (_topic, msg_id) in enumerate(pairs)}

    tick_states = operation(_tick_states)

    def _pause_schedule(self, name: str, note: str = "", actor: str | None = None):
        """Stop firing ``name`` until resumed (ticks meanwhile are not fired, nor counted missed).
        ``note`` says why (shown in lists). Returns True if it was running."""
        if not isinstance(note, str) or len(note) > 500:
            raise InvalidArgument("note must be a string of at most 500 characters")
        topic, p = yield from self._home(name)
        pk = self._schedule_keys(topic, p)
        now = yield from self._server_ms()
        who = (actor or self.actor).replace("|", "/")

        def fill(pipe):
            pipe.zrem(pk.schedule_due, name)
            pipe.hset(pk.schedule_runs, f"{name}|paused", f"{now}|{who}|{note}")
        removed, _ = yield pipeline(fill, transaction=not self.cluster)
        return bool(removed)

    pause_schedule = operation(_pause_schedule)

    def _resume_schedule(self, name: str):
        """Fire ``name`` again from its next fire time after now. Returns that time (ms), or None
        when the schedule has no more ticks."""
        topic, p = yield from self._home(name)
        s = (yield from self._read_schedules([(name, topic, p)]))[0]
        now = yield from self._server_ms()
        nxt = s.timing.next_after(max(now, s.last_tick_ms or -1))
        if s.max_runs and s.runs >= s.max_runs:
            nxt = None
        pk = self._schedule_keys(topic, p)

        def fill(pipe):
            pipe.hdel(pk.schedule_runs, f"{name}|paused")
            if nxt is not None:
                pipe.hset(pk.schedule_runs, f"{name}|next", nxt)
                pipe.zadd(pk.schedule_due, {name: nxt})
        yield pipeline(fill, transaction=not self.cluster)
        return nxt

    resume_schedule = operation(_resume_schedule)

    def _delete_schedule(self, name: str):
        """Remove ``name`` and its state (messages it published stay). Returns True if it existed."""
        try:
            topic, p = yield from self._home(name)
        except ScheduleNotFound:
            return False
        yield from self._drop_schedule(name, topic, p)
        yield cmd("hdel", schedules_registry_key(self.prefix), name)
        yield cmd("incr", schedules_version_key(self.prefix))
        return True

    delete_schedule = operation(_delete_schedule)
