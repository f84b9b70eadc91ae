"""Operator actions on messages: ``deliver_now``, ``reschedule``, ``kill``, ``cancel``, ``delete``,
``remove``, ``replay``, ``replay_dead``, ``replay_edited``, ``purge`` and ``find_by_key(s)``
(lua/deliver_now.lua, reschedule.lua, kill.lua, remove.lua, cancel.lua, replay.lua, replay_dead.lua,
replay_edited.lua, purge.lua). Every action is compare-and-set on the state the caller expects,
and bulk work goes in bounded batches."""

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..errors import Code, InvalidArgument, StateConflict, raise_for_code
from ..fingerprint import CANCELLED_FP, CORRUPT_FP, EXPIRED_FP
from ..ids import new_ids
from ..indexes import MAX_ENTRIES, declared, entries_blob, entry_count, hashes_of, record_entries
from ..keys import (
    DEFAULT_GROUP,
    id_for_partition,
    partition_of,
)
from ..states import MessageState
from ..steps import cmd, operation, pipeline, script
from .base import EngineBase, as_seconds, batch_fired, to_bytes

OP_BATCH = 100           # ids per replay / cancel / delete script call


class Operate(EngineBase):
    """Operator actions: one id, many ids, or everything in a state, in bounded batches."""

    def _per_id(self, picker, topic: str, group: str, head_args: list, ids: Iterable[str], *,
                creates: str = "", each: Sequence | None = None, hold: str | None = None):
        """Run ``script`` over ids, by partition (from each id) in batches of OP_BATCH; one code per
        id in the order given. Ids naming a partition the topic does not have are NOT_FOUND.
        ``creates`` (what the call does, for NotReplicated): the script makes messages deliverable,
        so each batch waits for replicas when wait_replicas is set. ``each``: one argument per id,
        passed right after it (the script then takes id, argument pairs). ``hold``: the operation
        whose holding area keeps what the script removes (engine/undo.py)."""
        ids = list(ids)
        layout = yield from self._layout(topic)
        holds = yield from self._hold_open(topic, group, hold, layout.partitions)
        by_partition: dict[int, list[int]] = {}
        codes = [int(Code.NOT_FOUND)] * len(ids)
        fired: set = set()
        for i, msg_id in enumerate(ids):
            p = partition_of(msg_id)
            if p < layout.partitions:
                by_partition.setdefault(p, []).append(i)
        for p, indexes in by_partition.items():
            keys = self._group_keys(topic, group, p).as_list() + holds[p]
            for start in range(0, len(indexes), OP_BATCH):
                part = indexes[start:start + OP_BATCH]
                args = head_args + [a for i in part for a in ((ids[i],) if each is None else (ids[i], each[i]))]
                if creates:
                    reply, acked = yield from self._write(picker, keys, args)
                else:
                    reply, acked = (yield script(picker, keys, args)), None
                reply = batch_fired(reply, (topic, p), fired)
                for i, c in zip(part, reply, strict=True):
                    codes[i] = int(c)
                done = [ids[i] for i, c in zip(part, reply, strict=True) if int(c) == 0]
                yield from self._hold_missed(topic, group, hold, holds[p], len(done))
                if done:
                    self._require_replicas(acked, f"{creates} {len(done)} message(s) of {topic!r}", done)
        yield from self._forward_fired(fired)
        return codes

    def _deliver_now(self, topic: str, msg_id: str, *, actor: str | None = None, group: str = DEFAULT_GROUP):
        """pending or retrying -> ready now. StateConflict if it is in another state."""
        code = (yield from self._deliver_now_many(topic, [msg_id], actor=actor, group=group))[0]
        self._raise_state(code, topic, msg_id, "pending or retrying (and not held behind its ordering key)")

    deliver_now = operation(_deliver_now)

    def _deliver_now_many(self, topic: str, ids: Iterable[str], *, actor: str | None = None,
                          group: str = DEFAULT_GROUP):
        """deliver_now for many ids, one script call per 100; one code per id (0 moved,
        Code.NOT_FOUND, Code.STATE_CONFLICT)."""
        return (yield from self._per_id(self.scripts.deliver_now, topic, group, [actor or self.actor, group], ids))

    deliver_now_many = operation(_deliver_now_many)

    def _reschedule(self, topic: str, msg_id: str, *, delay: float | timedelta = 0, at: datetime | None = None,
                    actor: str | None = None, group: str = DEFAULT_GROUP,
                    states: Iterable[MessageState] = (MessageState.pending, MessageState.retrying)):
        """Give a pending or retrying message of ``group`` a new due time (``delay`` from now by
        Redis's clock, or ``at``); it stays in its state. StateConflict if it is in another state
        (or held behind its ordering key), MessageNotFound if gone, DelayTooLong past max_delay."""
        code = (yield from self._reschedule_many(topic, [msg_id], delay=delay, at=at, actor=actor, group=group,
                                                 states=states))[0]
        if code == Code.DELAY_TOO_LONG:
            raise_for_code(code, topic, f"message {msg_id}'s new due time")
        self._raise_state(code, topic, msg_id, " or ".join(MessageState(s).value for s in states)
                          + " (and not held behind its ordering key)")

    reschedule = operation(_reschedule)

    def _reschedule_many(self, topic: str, ids: Iterable[str], *, delay: float | timedelta = 0,
                         at: datetime | None = None, actor: str | None = None, group: str = DEFAULT_GROUP,
                         states: Iterable[MessageState] = (MessageState.pending, MessageState.retrying)):
        """reschedule for many ids, one script call per 100, compare-and-set on ``states``; one code
        per id (0 moved, Code.NOT_FOUND, Code.STATE_CONFLICT, Code.DELAY_TOO_LONG). One due time
        for all: Redis's clock at the call plus ``delay``, or ``at``."""
        kind, value = self._due_args(delay, at)
        due_ms = value if kind == "at" else (yield from self._server_ms()) + value
        allowed = ",".join(MessageState(s).value for s in states)
        return (yield from self._per_id(self.scripts.reschedule, topic, group,
                                        [actor or self.actor, group, due_ms, allowed], ids))

    reschedule_many = operation(_reschedule_many)

    def _kill(self, topic: str, msg_id: str, *, actor: str | None = None, group: str = DEFAULT_GROUP):
        """Move a retrying message of ``group`` to the dead-letter queue now, with its last error,
        instead of waiting for its remaining attempts. StateConflict if it is not retrying."""
        code = (yield from self._kill_many(topic, [msg_id], actor=actor, group=group))[0]
        self._raise_state(code, topic, msg_id, "retrying")

    kill = operation(_kill)

    def _kill_many(self, topic: str, ids: Iterable[str], *, actor: str | None = None,
                   group: str = DEFAULT_GROUP, hold: str | None = None):
        """kill for many ids, one script call per 100; one code per id (0 moved, Code.NOT_FOUND,
        Code.STATE_CONFLICT). With ``hold``, undo(topic, hold) moves them back to retrying."""
        return (yield from self._per_id(self.scripts.kill, topic, group, [actor or self.actor, group, CORRUPT_FP],
                                        ids, hold=hold))

    kill_many = operation(_kill_many)

    def _cancel(self, topic: str, msg_id: str, *, actor: str | None = None, group: str = DEFAULT_GROUP,
                states: Iterable[MessageState] | None = None, running: bool = False, remove: bool = False):
        """Remove a message from ``group`` that is not being worked on. StateConflict if it is
        unacked (or in a state outside ``states``), MessageNotFound if it is gone.

        ``running=True`` also stops an unacked message (lua/cancel.lua): its lease is taken at
        once, the worker holding it learns it at its next lease extension (within a second:
        ``message.cancelled``, ``check_cancelled()`` raises ``Cancelled``, the asyncio worker
        cancels the handler's task), and the message becomes a dead letter with "cancelled by
        <actor>" in its history, or is removed with ``remove=True``. Any later ack or nack with
        that lease's token is refused."""
        if states is None:
            states = (MessageState.pending, MessageState.ready, MessageState.retrying)
            if running:
                states += (MessageState.unacked,)
        states = list(states)
        if running:
            code = (yield from self._cancel_many(topic, [msg_id], actor=actor, group=group, states=states,
                                                 remove=remove))[0]
        else:
            code = (yield from self._remove(topic, [msg_id], event="cancelled", states=states, actor=actor,
                                            group=group))[0]
        self._raise_state(code, topic, msg_id, " or ".join(MessageState(s).value for s in states))

    cancel = operation(_cancel)

    def _cancel_many(self, topic: str, ids: Iterable[str], *, actor: str | None = None, group: str = DEFAULT_GROUP,
                     states: Iterable[MessageState] = (MessageState.pending, MessageState.ready,
                                                       MessageState.retrying, MessageState.unacked),
                     remove: bool = False, hold: str | None = None):
        """cancel(..., running=True) for many ids, one script call per 100 (lua/cancel.lua); one
        code per id (0 cancelled, Code.NOT_FOUND, Code.STATE_CONFLICT). With ``hold``, the removed
        ones are kept for undo (an unacked one comes back ready)."""
        allowed = ",".join(MessageState(s).value for s in states)
        return (yield from self._per_id(self.scripts.cancel, topic, group,
                                        [actor or self.actor, group, "1" if remove else "", CANCELLED_FP,
                                         EXPIRED_FP, allowed], ids, hold=hold))

    cancel_many = operation(_cancel_many)

    def _delete(self, topic: str, ids: Iterable[str], *, state: MessageState = MessageState.dead,
                actor: str | None = None, group: str = DEFAULT_GROUP, hold: str | None = None):
        """Delete the given messages from ``group`` if they are still in ``state``; returns how many.
        With ``hold``, they are kept for undo (engine/undo.py)."""
        codes = yield from self._remove(topic, ids, event="deleted", states=[state], actor=actor, group=group,
                                        hold=hold)
        return sum(1 for c in codes if c == 0)

    delete = operation(_delete)

    def _remove(self, topic: str, ids: Iterable[str], *, event: str, states: Iterable[MessageState],
                actor: str | None = None, group: str = DEFAULT_GROUP, hold: str | None = None):
        """Compare-and-set removal; one code per id (0 removed, Code.NOT_FOUND, Code.STATE_CONFLICT).
        With ``hold``, the removed ones are kept for undo (engine/undo.py)."""
        allowed = ",".join(MessageState(s).value for s in states)
        return (yield from self._per_id(self.scripts.remove, topic, group,
                                        [event, allowed, actor or self.actor, group], ids, hold=hold))

    remove = operation(_remove)

    def _replay(self, topic: str, ids: Iterable[str], *, delay: float | timedelta = 0,
                actor: str | None = None, group: str = DEFAULT_GROUP):
        """dead -> ready (or pending after ``delay``) in ``group``, attempts reset. Ids no longer
        dead are skipped (compare-and-set), so replaying twice never delivers twice. Returns how
        many moved."""
        ms = int(as_seconds(delay, "delay") * 1000)
        codes = yield from self._per_id(self.scripts.replay, topic, group, [ms, actor or self.actor, group], ids,
                                        creates="replaying")
        return sum(1 for c in codes if c == 0)

    replay = operation(_replay)

    def _replay_dead(self, topic: str, fingerprint: str | None = None, batch: int = 100, *,
                     delay: float | timedelta = 0, actor: str | None = None, progress=None,
                     since: datetime | None = None, until: datetime | None = None,
                     group: str = DEFAULT_GROUP):
        """Replay the whole dead-letter queue of ``group``, or one error group, in bounded batches
        (each one script call, ~3 ms for 100). Only letters dead when the call started (or before
        ``until``) and after ``since`` are taken. ``progress`` is called with the running total
        after each batch. Returns how many moved."""
        cutoff = (yield from self._server_ms()) if until is None else int(until.timestamp() * 1000)
        since_ms = 0 if since is None else int(since.timestamp() * 1000)
        total = 0
        while True:
            examined, moved = yield from self._replay_dead_batch(topic, fingerprint, cutoff=cutoff, since=since_ms,
                                                                 batch=batch, delay=delay, actor=actor, group=group)
            total += moved
            if progress:
                progress(total)
            if examined < batch:
                return total

    replay_dead = operation(_replay_dead)

    def _replay_dead_batch(self, topic: str, fingerprint: str | None, *, cutoff: int, since: int = 0,
                           batch: int = 100, delay: float | timedelta = 0, actor: str | None = None,
                           group: str = DEFAULT_GROUP):
        """One bounded batch of replay_dead over letters that died in [since, cutoff] (Redis ms),
        taken from the partitions in turn. Returns (examined, moved); fewer examined than
        ``batch`` means the range is done in every partition. Safe to repeat after a crash:
        replayed letters are no longer dead, so nothing moves twice."""
        if not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000")
        ms = int(as_seconds(delay, "delay") * 1000)
        examined = moved = 0
        for p in range((yield from self._layout(topic)).partitions):
            if examined >= batch:
                break
            r, acked = yield from self._write(
                self.scripts.replay_dead, self._group_keys(topic, group, p).as_list(),
                [fingerprint or "", cutoff, batch - examined, ms, actor or self.actor, since, group])
            examined += int(r[0])
            moved += int(r[1])
            if int(r[1]):
                self._require_replicas(acked, f"replaying {int(r[1])} dead letter(s) of {topic!r}")
            if len(r) > 2:
                raise StateConflict(f"dead letter {r[2].decode()} is corrupt and cannot be replayed; delete it, "
                                    f"then replay again ({moved} replayed in this batch)")
        return examined, moved

    replay_dead_batch = operation(_replay_dead_batch)

    def _replay_edited(self, topic: str, msg_id: str, payload: Any, seen_sha1: str, *,
                       actor: str | None = None, group: str = DEFAULT_GROUP):
        """Replace a dead letter's payload and replay it, atomically; returns the id replayed (a new
        id when other groups still share the original). ``seen_sha1`` is the SHA-1 hex of the
        payload the editor started from: if the payload changed meanwhile (or the message is no
        longer dead), StateConflict and nothing changes."""
        data = to_bytes(payload)
        p = partition_of(msg_id)
        for attempt in range(3):
            layout = yield from self._layout(topic, fresh=attempt > 0)
            if p >= layout.partitions:
                raise_for_code(Code.NOT_FOUND, topic, msg_id)
            blob = ""
            if fields := declared(layout):   # the edited payload's index entries (its headers stay)
                record = yield cmd("hget", self.keys(topic, p).msgs, msg_id)
                text = record_entries(fields, record, data) or ""
                if entry_count(text) > MAX_ENTRIES:
                    raise InvalidArgument(f"the edited payload has {entry_count(text):,} values in topic {topic!r}'s "
                                          f"indexed fields; a message may have at most {MAX_ENTRIES}")
                blob = entries_blob([msg_id], [hashes_of(text)])   # the script writes them for the id it replays
            reply, acked = yield from self._write(self.scripts.replay_edited, self._group_keys(topic, group, p).as_list(), [
                msg_id, data, seen_sha1, actor or self.actor, group, id_for_partition(new_ids(1)[0], p),
                layout.indexes, blob])
            if int(reply[0]) != Code.STALE_LAYOUT:
                break
            self._layouts.drop(topic)
        else:
            raise StateConflict(f"the indexed fields of topic {topic!r} changed three times during this replay; "
                                "nothing was written: try again")
        code = int(reply[0])
        if code == Code.PAYLOAD_TOO_LARGE:
            raise_for_code(code, topic, f"{len(data):,} bytes")
        self._raise_state(code, topic, msg_id, "dead with the payload you edited (someone changed it first)")
        self._require_replicas(acked, f"replaying the edited message {msg_id} of {topic!r}", [reply[1].decode()])
        return reply[1].decode()

    replay_edited = operation(_replay_edited)

    def _purge(self, topic: str, state: MessageState | str, *, batch: int = 100, actor: str | None = None,
               group: str = DEFAULT_GROUP, hold: str | None = None):
        """Delete every message of ``group`` in ``state`` (not unacked) that was there when the call
        started, in bounded batches. Returns how many were deleted; each one is an event. With
        ``hold``, they are kept for undo (engine/undo.py)."""
        cutoff = yield from self._purge_cutoff(topic, state, group=group)
        if cutoff is None:
            return 0
        entered_before, skips, total = (yield from self._server_ms()), {}, 0
        while True:
            deleted, examined = yield from self._purge_batch(topic, state, cutoff=cutoff, batch=batch, actor=actor,
                                                             group=group, entered_before=entered_before, skips=skips,
                                                             hold=hold)
            total += deleted
            if examined < batch:
                return total

    purge = operation(_purge)

    def _purge_cutoff(self, topic: str, state: MessageState | str, *, group: str = DEFAULT_GROUP):
        """The largest score in ``state`` now across the partitions (None when empty): a purge stops
        there, so a steady inflow cannot keep it going."""
        state = MessageState(state)
        if state is MessageState.unacked:
            raise InvalidArgument("unacked messages cannot be purged: a worker holds them; wait for "
                                  "their ack or lease expiry, or pause the group first")
        partitions = (yield from self._layout(topic)).partitions

        def fill(pipe):
            for p in range(partitions):
                pipe.zrange(self._group_keys(topic, group, p).state(state), -1, -1, withscores=True)
        scores = [last[0][1] for last in (yield pipeline(fill)) if last]
        return repr(max(scores)) if scores else None

    purge_cutoff = operation(_purge_cutoff)

    def _purge_batch(self, topic: str, state: MessageState | str, *, cutoff: str, batch: int = 100,
                     actor: str | None = None, group: str = DEFAULT_GROUP, entered_before: int | None = None,
                     skips: dict[int, int] | None = None, hold: str | None = None):
        """Delete up to ``batch`` messages of ``state`` scored <= cutoff, from the partitions in
        turn (one script call each); returns (deleted, examined). Fewer examined than ``batch``
        means done. A call whose holding area copied its byte cap (large payloads, hold.lua)
        stops early and answers ``batch`` examined, so the caller calls again.

        With ``entered_before`` (Redis ms, the moment the purge was confirmed) a message that
        entered the state later is kept although its score is within the cutoff: a message
        published, nacked or replayed after the confirmation with an earlier due time. Such
        messages stay at the front of the range, so ``skips`` (per partition, kept by the caller
        between calls) says how many to step over."""
        state = MessageState(state)
        if state is MessageState.unacked:
            raise InvalidArgument("unacked messages cannot be purged")
        skips = {} if skips is None else skips
        deleted = examined = 0
        partitions = (yield from self._layout(topic)).partitions
        holds = yield from self._hold_open(topic, group, hold, partitions)
        for p in range(partitions):
            if examined >= batch:
                break
            n, kept, spent = yield script(self.scripts.purge, self._group_keys(topic, group, p).as_list() + holds[p], [
                state.value, batch - examined, actor or self.actor, cutoff, group,
                "" if entered_before is None else int(entered_before), skips.get(p, 0)])
            deleted, examined = deleted + int(n), examined + int(n) + int(kept)
            skips[p] = skips.get(p, 0) + int(kept)
            yield from self._hold_missed(topic, group, hold, holds[p], int(n))
            if spent:   # the hold's byte cap cut the call short: not done, the caller calls again
                return deleted, batch
        return deleted, examined

    purge_batch = operation(_purge_batch)

    def _find_by_key(self, topic: str, key: str):
        """The id holding ``key``, or None: a live message's, or a done one's while a dedup window
        keeps its key (publish(dedup=)); ``get`` tells them apart."""
        return (yield from self._find_by_keys(topic, [key])).get(key)

    find_by_key = operation(_find_by_key)

    def _find_by_keys(self, topic: str, keys: list[str]):
        """{key: id} of the messages holding any of ``keys`` (as find_by_key). One HMGET per partition,
        pipelined (a key routed by an ordering key may sit in any partition)."""
        if not keys:
            return {}
        partitions = (yield from self._layout(topic)).partitions

        def fill(pipe):
            for p in range(partitions):
                pipe.hmget(self.keys(topic, p).dedup, keys)
        found = {}
        for ids in (yield pipeline(fill)):
            for key, msg_id in zip(keys, ids, strict=True):
                if msg_id and key not in found:
                    found[key] = msg_id.decode()
        return found

    find_by_keys = operation(_find_by_keys)

