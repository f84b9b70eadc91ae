"""Undo for destructive operations (issue #38 point 5): ``undo``, ``held`` and ``held_size``
(lua/undo.lua, lua/includes/hold.lua).

purge, remove/delete, cancel_many and kill_many given ``hold="<operation id>"`` copy each message
they destroy (or kill) into a holding area of that operation, in the same script call and the same
partition, kept ``hold_keep`` seconds (24 h by default). ``undo`` puts the set back in the state it
left; ``held_size`` is what the holding areas cost, for the memory budget."""

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from redis.exceptions import OutOfMemoryError

from ..errors import HoldExpired, InvalidArgument
from ..keys import DEFAULT_GROUP, hold_key, holds_key, validate_group
from ..steps import operation, pipeline, script
from .base import EngineBase

HOLD_META = "~meta"   # the holding area's own field (includes/hold.lua); no message id begins with "~"
HOLD_UNHELD = "~unheld"   # destroyed without a copy because Redis was full (_hold_missed)
HOLD_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
HOLDS_READ = 1000     # holding areas read per partition by held(): the newest first


@dataclass(frozen=True, slots=True)
class Holding:
    """One operation's holding area in one group, summed over the partitions."""

    group: str
    operation: str
    until: datetime     # when it expires (nothing can be undone after)
    messages: int       # held now (put back ones are no longer counted)
    # Their values in the area (payload, headers, history, ...), as stored. Redis's own memory for
    # them is about a third more (hash entries): 301 B a message against 220 counted, for a
    # 100-byte payload on Redis 7 (measured); a budget should scale it so.
    bytes: int
    not_held: int       # destroyed without a copy: the area was full (hold_max_messages / hold_max_bytes)


@dataclass(frozen=True, slots=True)
class UndoResult:
    restored: int
    refused: dict[str, str]   # id -> why it was not put back ('present', 'key <id>', 'not dead')


@dataclass(frozen=True, slots=True)
class UndoStep:
    cursor: str | None        # where the next call continues in the partition; None: done
    restored: int
    refused: dict[str, str]
    expired: bool = False     # the partition has no holding area (expired, or never held)


def _check_hold(hold: str) -> str:
    if not isinstance(hold, str) or not HOLD_ID.match(hold):
        raise InvalidArgument(f"hold must be 1-64 letters, digits or '_.:-', not {hold!r}")
    return hold


class Undo(EngineBase):
    """Holding areas of destructive operations, and putting their messages back."""

    hold_keep: float = 24 * 3600          # seconds a holding area is kept
    hold_max_messages: int = 100_000      # per operation, group and partition; past it, destroyed as without hold
    hold_max_bytes: int = 64 * 1024 ** 2

    def _hold_keys(self, topic: str, group: str, hold: str | None, partitions: int) -> list[str]:
        """The holding area KEY of each partition ([] per partition without a hold)."""
        if hold is None:
            return [[] for _ in range(partitions)]
        return [[hold_key(topic, p, group, hold, self.prefix)] for p in range(partitions)]

    def _hold_open(self, topic: str, group: str, hold: str | None, partitions: int):
        """Opens (or keeps) the operation's holding area in every partition: the scripts find its
        caps in its "~meta" field. Idempotent: a resumed operation keeps its counts and expiry."""
        if hold is None:
            return [[] for _ in range(partitions)]
        _check_hold(hold)
        validate_group(group)
        until = (yield from self._server_ms()) + int(self.hold_keep * 1000)
        meta = f"{until}|{int(self.hold_max_messages)}|{int(self.hold_max_bytes)}|0|0|0"
        keys = self._hold_keys(topic, group, hold, partitions)

        def fill(pipe):
            for p in range(partitions):
                pipe.hsetnx(keys[p][0], HOLD_META, meta)
                pipe.pexpireat(keys[p][0], until, nx=True)
                pipe.zadd(holds_key(topic, p, self.prefix), {f"{group}|{hold}": until}, gt=True)
                pipe.zremrangebyscore(holds_key(topic, p, self.prefix), "-inf", until - int(self.hold_keep * 1000))
        try:
            yield pipeline(fill)
        except OutOfMemoryError:
            # Redis is full (maxmemory, noeviction): the operation runs without a copy, because a
            # purge is what frees memory; _hold_missed counts what it destroys as not held.
            return [[] for _ in range(partitions)]
        return keys

    def _hold_missed(self, topic: str, group: str, hold: str | None, keys: list, n: int):
        """Count ``n`` messages destroyed without a copy because _hold_open found Redis full (``keys``
        empty although ``hold`` was asked), in the area's "~unheld" field: held() reports them as
        not held. Best effort: if Redis is still full, the count is lost, never the removal."""
        if hold is None or keys or n == 0:
            return
        until = (yield from self._server_ms()) + int(self.hold_keep * 1000)
        key = hold_key(topic, 0, group, hold, self.prefix)   # a count, not messages: partition 0 keeps it

        def fill(pipe):
            pipe.hincrby(key, HOLD_UNHELD, n)
            pipe.pexpireat(key, until, nx=True)
            pipe.zadd(holds_key(topic, 0, self.prefix), {f"{group}|{hold}": until}, gt=True)
        yield pipeline(fill, raise_on_error=False)

    def _group_layout(self, topic: str, group: str):
        """The topic's layout, once ``group`` is known in it: an undo into a deleted group would put
        messages where no worker claims them and no delete_group reaches."""
        layout = yield from self._layout(topic, fresh=True)
        if group not in layout.groups:
            raise InvalidArgument(f"topic {topic!r} has no group {group!r} any more (it was deleted, and its "
                                  "holding areas with it): nothing can be put back there")
        return layout

    def _undo(self, topic: str, hold: str, *, group: str = DEFAULT_GROUP, batch: int = 100,
              actor: str | None = None, progress=None):
        """Put the messages operation ``hold`` removed from ``group`` back in the state each left
        (lua/undo.lua): pending with its due time, ready, retrying, dead in its error group; a killed
        one from dead back to retrying. One script call per ``batch`` held messages (HSCAN cursor).
        A message whose id is in the group again, or whose dedup key another message holds now, is
        not put back: it is reported in ``refused`` and stays held until the area expires. Running
        it again puts nothing back twice. HoldExpired when no partition has the area any more."""
        partitions = (yield from self._group_layout(topic, group)).partitions
        restored, refused, expired = 0, {}, 0
        for p in range(partitions):
            cursor = "0"
            while cursor is not None:
                step = yield from self._undo_batch(topic, hold, partition=p, cursor=cursor, group=group, batch=batch,
                                                   actor=actor)
                if step.expired:
                    expired += 1
                    break
                restored += step.restored
                refused.update(step.refused)
                cursor = step.cursor
                if progress:
                    progress(restored)
        if expired == partitions:
            raise HoldExpired(f"operation {hold} holds nothing for topic {topic!r}, group {group!r}: its holding "
                              f"area expired (kept {self.hold_keep / 3600:g} h) or it ran without one; "
                              "nothing was put back")
        return UndoResult(restored, refused)

    undo = operation(_undo)

    def _undo_batch(self, topic: str, hold: str, *, partition: int, cursor: str = "0", group: str = DEFAULT_GROUP,
                    batch: int = 100, actor: str | None = None):
        """One script call of undo: up to about ``batch`` held messages of one partition from
        ``cursor`` (HSCAN's; "0" to start). Returns an UndoStep (its cursor None when the partition
        is done, ``expired`` when it has no holding area)."""
        _check_hold(hold)
        if not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000")
        yield from self._group_layout(topic, group)
        key = hold_key(topic, partition, group, hold, self.prefix)
        if cursor == "0":
            # Listed in the indexed fields they may lack before any is back (engine/index.py).
            yield from self._index_held(topic, partition, group, hold)
        r = yield script(self.scripts.undo, self._group_keys(topic, group, partition).as_list() + [key],
                         [cursor, batch, actor or self.actor, group, hold])
        if r[0] == b"expired":
            return UndoStep(None, 0, {}, expired=True)
        pairs = [x.decode() for x in r[2]]
        nxt = r[0].decode()
        return UndoStep(None if nxt == "0" else nxt, int(r[1]), dict(zip(pairs[::2], pairs[1::2], strict=True)))

    undo_batch = operation(_undo_batch)

    def _held(self, topic: str):
        """The topic's holding areas now (one Holding per operation and group, newest first)."""
        partitions = (yield from self._layout(topic)).partitions
        now = yield from self._server_ms()

        def ranges(pipe):
            for p in range(partitions):
                pipe.zrevrangebyscore(holds_key(topic, p, self.prefix), "+inf", now, start=0, num=HOLDS_READ,
                                      withscores=True)
        rows = [(p, m.decode(), int(s)) for p, found in enumerate((yield pipeline(ranges))) for m, s in found]

        def metas(pipe):
            for p, member, _ in rows:
                group, hold = member.split("|", 1)
                pipe.hmget(hold_key(topic, p, group, hold, self.prefix), HOLD_META, HOLD_UNHELD)
        sums: dict[tuple[str, str], list[int]] = {}
        for (_, member, until), (meta, missed) in zip(rows, (yield pipeline(metas)), strict=True):
            if meta is None and missed is None:
                continue   # expired between the two reads
            _, _, _, n, b, unheld = (int(x) for x in (meta or b"0|0|0|0|0|0").decode().split("|"))
            s = sums.setdefault(tuple(member.split("|", 1)), [0, 0, 0, 0])
            s[0], s[1], s[2], s[3] = max(s[0], until), s[1] + n, s[2] + b, s[3] + unheld + int(missed or 0)
        out = [Holding(g, h, datetime.fromtimestamp(s[0] / 1000, UTC), s[1], s[2], s[3])
               for (g, h), s in sums.items()]
        return sorted(out, key=lambda x: x.until, reverse=True)

    held = operation(_held)

    def _held_size(self, topic: str):
        """{"messages": n, "bytes": b} held for undo in ``topic`` now (memory budgets count it)."""
        holdings = yield from self._held(topic)
        return {"messages": sum(h.messages for h in holdings), "bytes": sum(h.bytes for h in holdings)}

    held_size = operation(_held_size)
