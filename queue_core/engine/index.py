"""Indexed fields (issue 36): ``set_indexes``, ``indexes`` and ``build_index`` (lua/index.lua).

A topic declares up to four fields (``payload.<path>`` or ``header.<name>``); what a message's
entries are and how a query value is looked up is queue_core/indexes.py. The declaration lives
in every partition's config hash:

    indexes      JSON [[slot, field], ...]: the fields and their slots (a slot is never reused, so
                 the entries of a dropped field never answer for a new one); publish sends this
                 text back and the script refuses a stale one, so a publisher that cached an older
                 declaration reloads it instead of leaving a message out of an index
    index_seq    the last slot handed out
    index_ready  JSON [slot, ...]: the slots whose entries cover every message (a query uses only
                 these; a field declared on a topic that holds messages is built first)

publish.lua, replay_edited.lua and schedule ticks append a new message's entries to the
partition's index log; removals count the messages that leave, and sweep the log once as many have
gone as are left (includes/index.lua); ``sweep_index`` (lua/sweep_index.lua) sweeps it now. A
search (engine/find.py) asks here which messages of a partition may hold a value
(``_index_prefix``, ``_index_candidates``).
"""

import json
import zlib
from dataclasses import dataclass

from ..errors import Code, InvalidArgument, QueueError
from ..ids import ID_CHARS
from ..indexes import (
    capped,
    check_fields,
    declared,
    entries_blob,
    entry_hash,
    hashes_of,
    lookup_text,
    record_entries,
)
from ..keys import (
    HASHTABLE_FIELD,
    INDEX_HASH_CHARS,
    INDEX_LANES,
    hold_key,
    id_for_partition,
    index_legacy_keys,
    index_log_keys,
)
from ..layout import TopicLayout
from ..query import Query
from ..steps import cmd, operation, pipeline, script
from .base import EngineBase, as_text

SWEEP_STEP = 500          # entries one sweep_index call checks (~1.5 ms of Redis on the 2-core test machine)
BUILD_SCAN = 100          # records one HSCAN call looks at while building (each step holds them in memory)
HELD_READ = 100           # held records one index.lua read returns (and at most 2 MB of them)
LIST_ENTRIES = 2000       # entries one index.lua call lists at most (~3 ms)
HOLD_IX = "~ix"           # a holding area's field: the indexed fields ready at every call that held there


# A search reads the log's hashes in pieces of INDEX_READ_PIECE bytes, and gives up on a value with
# more candidates than INDEX_CANDIDATES_MOST in one partition (it walks the state instead: such a
# value is found sooner so).
INDEX_READ_PIECE = 1 << 20
INDEX_CANDIDATES_MOST = 20_000

@dataclass(frozen=True, slots=True)
class Index:
    """An indexed field of a topic: its slot, and whether its entries cover every message yet."""

    field: str
    slot: int
    ready: bool


@dataclass(frozen=True, slots=True)
class IndexBuild:
    """One step of ``build_index``: how many messages it listed, where the next step starts
    (None: the build is over and the topic's indexes are ready), and how far it is."""

    listed: int
    cursor: str | None
    partition: int
    partitions: int
    capped: int = 0     # messages listed with only their first indexes.MAX_ENTRIES entries


class Indexing(EngineBase):
    """set_indexes, indexes, build_index."""

    def _set_indexes(self, topic: str, fields, *, actor: str | None = None):
        """Declare the topic's indexed fields (at most four, ``payload.<path>`` or
        ``header.<name>``, the left side of a query term). Fields already declared keep their
        entries; a new field is ready at once on an empty topic, else after ``build_index`` has
        walked the messages (queries scan meanwhile); a field left out stops being used (its
        entries leave with their messages). Returns the indexes."""
        fields = check_fields(fields)
        layout = yield from self._layout(topic, fresh=True)
        if not (yield cmd("exists", self.keys(topic).config)):
            raise InvalidArgument(f"topic {topic!r} does not exist: configure it first")
        raw_seq, raw_ready = yield cmd("hmget", self.keys(topic).config, ["index_seq", "index_ready"])
        old = dict((f, s) for s, f in declared(layout))
        seq = int(raw_seq or 0)
        ready = set(json.loads(raw_ready or "[]"))
        spec, new = [], []
        for f in fields:
            if f not in old:
                seq += 1
                old[f] = seq
                new.append(seq)
            spec.append([old[f], f])
        ready &= {s for s, _ in spec}
        text = json.dumps(spec, separators=(",", ":")) if spec else ""

        def write(ready_slots):
            def fill(pipe):
                for p in range(layout.partitions):
                    pipe.hset(self.keys(topic, p).config, mapping={"indexes": text, "index_seq": seq,
                                                                   "index_ready": json.dumps(sorted(ready_slots))})
            return pipeline(fill)
        yield write(ready)
        self._layouts.drop(topic)
        # A new field is ready at once only on a topic empty *after* the declaration is written:
        # from then on a publisher with an older one is refused (stale), so no message can have
        # slipped in without its entries between this check and the write.
        if new and not (yield from self._holds_messages(topic, layout)):
            ready |= set(new)
            yield write(ready)
        return [Index(f, s, s in ready) for s, f in spec]

    set_indexes = operation(_set_indexes)

    def _indexes(self, topic: str):
        """The topic's indexed fields, in declaration order."""
        layout = yield from self._layout(topic, fresh=True)
        ready = set(json.loads((yield cmd("hget", self.keys(topic).config, "index_ready")) or "[]"))
        return [Index(f, s, s in ready) for s, f in declared(layout)]

    indexes = operation(_indexes)

    def _holds_messages(self, topic: str, layout: TopicLayout):
        """Whether any partition holds a message: one pipelined round trip (each msgs hash may
        carry the hashtable-keeping field, keys.HASHTABLE_FIELD, which is never a message)."""
        def fill(pipe):
            for p in range(layout.partitions):
                pipe.hlen(self.keys(topic, p).msgs)
                pipe.hexists(self.keys(topic, p).msgs, HASHTABLE_FIELD)
        replies = yield pipeline(fill)
        return any(int(n) - int(bool(m)) > 0 for n, m in zip(replies[0::2], replies[1::2], strict=True))

    def _build_index(self, topic: str, cursor: str | None = None, *, count: int = BUILD_SCAN):
        """One step of listing the topic's messages in its indexes: one HSCAN of ``count`` records
        of one partition and one index.lua call. Start with ``cursor=None`` and pass each step's
        ``cursor`` to the next until it is None: every declared field is then ready. A declaration
        changed during the build refuses the step (start again)."""
        layout = yield from self._layout(topic, fresh=True)
        fields = declared(layout)
        if not fields:
            raise InvalidArgument(f"topic {topic!r} declares no indexed field")
        # The cursor names the declaration it walks for: one changed midway (a field added) would
        # leave the messages walked before without the new field's entries.
        spec = f"{zlib.crc32(layout.indexes.encode()):08x}"
        p, scan, rebuild_walk = 0, 0, False
        if cursor:
            try:
                p_text, scan_text, cursor_spec = cursor.split(":")
                p, scan = int(p_text), int(scan_text)
                if not 0 <= scan < 2 ** 64:          # what Redis takes as an HSCAN cursor
                    raise ValueError
            except ValueError:
                raise InvalidArgument(f"malformed index build cursor {cursor[:40]!r}") from None
            # ("r": this partition's walk began with every field ready, listing them all: a rebuild.)
            rebuild_walk = cursor_spec == spec + "r"
            if cursor_spec not in (spec, spec + "r"):
                raise QueueError(f"the indexed fields of topic {topic!r} changed during the build: start it again")
            if not 0 <= p < layout.partitions:
                raise InvalidArgument(f"the index build cursor names partition {p}, which topic {topic!r} lacks")
        k = self.keys(topic, p)
        # The entries of the fields not ready yet: a ready field's are in the log already (publish
        # wrote them), and the log keeps a copy per append. All ready: a rebuild of every field.
        ready = set(json.loads((yield cmd("hget", k.config, "index_ready")) or "[]"))
        building = tuple(f for f in fields if f[0] not in ready) or fields
        if scan == 0:
            rebuild_walk = all(f[0] in ready for f in fields)
        scan, records = yield cmd("hscan", k.msgs, scan, count=count)
        # One rewritten since this read (a debounce, an edited replay) got its new entries from its
        # writer: the old record's are only extra candidates.
        done = yield from self._list_records(k, layout, building, records.items())
        if done is None:
            self._layouts.drop(topic)
            raise QueueError(f"the indexed fields of topic {topic!r} changed during the build: start it again")
        listed, capped_n = done
        if int(scan):
            return IndexBuild(listed, f"{p}:{int(scan)}:{spec}{'r' if rebuild_walk else ''}", p, layout.partitions,
                              capped_n)
        if rebuild_walk and all(f[0] in ready for f in fields) and not (yield cmd("zcard", k.p.holds)):
            # A rebuild walked the whole partition, listing every field of every stored message:
            # strings of the log's earlier format, which make its searches walk the state
            # (_index_candidates), are superseded. Not while messages are held for undo: their
            # entries may be there alone (undo lists only fields not ready when they were held).
            yield cmd("unlink", *index_legacy_keys(k.p))
        if p + 1 < layout.partitions:
            return IndexBuild(listed, f"{p + 1}:0:{spec}", p + 1, layout.partitions, capped_n)
        slots = [s for s, _ in fields]

        def fill(pipe):
            for q in range(layout.partitions):
                pipe.hset(self.keys(topic, q).config, "index_ready", json.dumps(sorted(slots)))
        yield pipeline(fill)
        return IndexBuild(listed, None, p, layout.partitions, capped_n)

    build_index = operation(_build_index)

    def _sweep_index(self, topic: str, *, step: int = SWEEP_STEP):
        """Drop the index log's entries of messages that are gone, in every partition, now (the
        removals sweep by themselves once as many messages have gone as are left): script calls
        that check ``step`` entries each (at most 5,000). A sweep the removals had begun is
        finished first, then a whole one runs, so afterwards the log holds the entries of stored
        messages alone (and of those held for undo). Returns the number of calls."""
        layout = yield from self._layout(topic, fresh=True)
        calls = 0
        for p in range(layout.partitions):
            keys = self.keys(topic, p).p.as_list()
            start, whole = "1", False
            while True:
                reply = yield script(self.scripts.sweep_index, keys, [max(1, min(int(step), 5_000)), start])
                calls += 1
                whole = whole or bool(start and as_text(reply[2]))   # began a whole sweep (or no log)
                start = ""
                if not as_text(reply[1]):                                # none under way any more
                    if whole:
                        break
                    start = "1"   # that was the removals' sweep, begun before this call: now a whole one
        return calls

    sweep_index = operation(_sweep_index)

    def _list_records(self, k, layout: TopicLayout, fields, records, area: str = ""):
        """List ``records`` ((id, stored record) pairs of partition keys ``k``) in ``fields``
        through index.lua, at most LIST_ENTRIES entries a call; ``area``: a holding area whose
        messages count as existing. Returns (messages listed, how many of them with only their
        first indexes.MAX_ENTRIES entries: a record stored before its field was declared may have
        more than a publish takes), or None when the declaration changed (nothing more written)."""
        ids, hashes, capped_n = [], [], 0
        for raw_id, record in records:
            msg_id = as_text(raw_id)
            if msg_id == HASHTABLE_FIELD:
                continue
            text = record_entries(fields, record)
            if text:
                ids.append(msg_id)
                first = capped(text)
                hashes.append(hashes_of(first))
                capped_n += first != text
        listed = 0
        for piece in _by_entries(ids, hashes):
            reply = yield script(self.scripts.index, k.p.as_list(), [layout.indexes, entries_blob(*piece), area])
            if int(reply[0]) == Code.STALE_LAYOUT:
                return None
            listed += int(reply[1])
        return listed, capped_n

    def _index_held(self, topic: str, partition: int, group: str, hold: str):
        """Before undo puts back what holding area ``hold`` of ``group`` holds in ``partition``:
        list its messages in the indexed fields that were not ready at every call that held
        messages there (the area's "~ix", includes/hold.lua). A message held before a field was
        declared, or while its build ran, was walked by no build and has no entries of it; listed
        now, before it is back, a search never misses it and an undo cut off midway loses
        nothing (run again, it lists again: an entry twice is an extra candidate). Read
        ``HELD_READ`` records a call (index.lua), listed in calls of at most ``LIST_ENTRIES``
        entries. Areas of no indexed field, or whose fields were all ready, cost one HGET."""
        area = f"{group}|{hold}"
        key = hold_key(topic, partition, group, hold, self.prefix)
        for attempt in range(4):
            layout = yield from self._layout(topic, fresh=attempt > 0)
            fields = declared(layout)
            if not fields:
                return
            k = self.keys(topic, partition)
            try:
                ready = {int(s) for s in json.loads((yield cmd("hget", key, HOLD_IX)) or "[]")}
            except (ValueError, TypeError):
                ready = set()                   # unreadable: list them all
            missing = tuple(f for f in fields if f[0] not in ready)
            if not missing:
                return
            cursor = "0"
            while True:
                reply = yield script(self.scripts.index, k.p.as_list(),
                                     [layout.indexes, "", area, cursor, HELD_READ])
                if int(reply[0]) == Code.STALE_LAYOUT:
                    break
                cursor = as_text(reply[2])
                records = zip(reply[3::2], reply[4::2], strict=True)
                if (yield from self._list_records(k, layout, missing, records, area)) is None:
                    break
                if cursor == "0":
                    return
            self._layouts.drop(topic)   # declared anew meanwhile: the area again, with the new fields
        raise QueueError(f"the indexed fields of topic {topic!r} changed four times while undo listed the messages "
                         f"held in partition {partition}; none of those was put back. Run the undo again (it puts "
                         "nothing back twice).")

    def _index_prefix(self, topic: str, query: Query):
        """The index lookup (the hash, indexes.entry_hash) of the query's first equality
        term on a ready indexed field, or '' when no term can use one (the search then walks the state)."""
        fields = declared((yield from self._layout(topic)))
        if not fields:
            return ""
        slots = {f: s for s, f in fields}
        usable = [(slots[name], look) for t in query.terms
                  if t.op == ":" and t.field in ("payload", "header")
                  and (name := ".".join((t.field, *t.path))) in slots and (look := lookup_text(t.value)) is not None]
        if not usable:
            return ""
        ready = set(json.loads((yield cmd("hget", self.keys(topic).config, "index_ready")) or "[]"))
        for slot, look in usable:
            if slot in ready:
                return entry_hash(slot, look)
        return ""

    def _index_candidates(self, topic: str, p: int, lookup: str):
        """The ids of the entries of partition p's index log whose hash is ``lookup``
        (includes/index.lua), without repeats, in id order. Every lane's hashes are read with
        GETRANGE in pieces of INDEX_READ_PIECE, pipelined (Redis is never held for a whole large
        lane), then the ids of the entries found, between two reads of the lanes' versions, which
        a sweep bumps when it replaces a lane: a changed version reads the log again (appends keep
        every offset; the read stops at the lengths it began with, so what was appended meanwhile
        is left for the next page). None: the log stayed too busy to read, holds too many
        candidates, a lane's two strings disagree (a hand edit), or strings of the log's earlier
        format are there (keys.index_legacy_keys): the search then walks the state."""
        pk = self.keys(topic, p).p
        logs = index_log_keys(pk)
        hash_keys, id_keys = logs[:INDEX_LANES], logs[INDEX_LANES:2 * INDEX_LANES]
        versions = [f"v{lane}" for lane in range(INDEX_LANES)]
        width = len(id_for_partition("0" * ID_CHARS, p))
        needle = lookup.encode()
        legacy = index_legacy_keys(pk)
        for _attempt in range(3):
            def shape(pipe):
                pipe.hmget(pk.ixs, versions)
                pipe.exists(*legacy)
                for h, i in zip(hash_keys, id_keys, strict=True):
                    pipe.strlen(h)
                    pipe.strlen(i)
            # (One transaction: a lane's two strings are read as one script left them.)
            before, old_format, *sizes = yield pipeline(shape, transaction=True)
            if old_format:
                return None      # a log of the earlier format, not rebuilt yet: walk the state
            lanes = []           # (lane, bytes of hashes to read)
            for lane in range(INDEX_LANES):
                size, id_size = sizes[2 * lane], sizes[2 * lane + 1]
                if size % INDEX_HASH_CHARS or id_size != size // INDEX_HASH_CHARS * width:
                    return None  # the lane's two strings disagree (a hand edit)
                if size:
                    lanes.append((lane, size))

            def pieces(pipe, lanes=lanes):
                for lane, size in lanes:
                    for start in range(0, size, INDEX_READ_PIECE):
                        pipe.getrange(hash_keys[lane], start, min(size, start + INDEX_READ_PIECE) - 1)
            replies = iter((yield pipeline(pieces)))
            found: list[tuple[int, int]] = []    # (lane, entry) of each entry whose hash is the lookup's
            for lane, size in lanes:
                data = b"".join(next(replies) for _ in range(0, size, INDEX_READ_PIECE))
                at = data.find(needle)
                while at >= 0:
                    if at % INDEX_HASH_CHARS:        # across two entries' hashes: not one
                        at = data.find(needle, at + 1)
                        continue
                    found.append((lane, at // INDEX_HASH_CHARS))
                    if len(found) > INDEX_CANDIDATES_MOST:
                        return None
                    at = data.find(needle, at + INDEX_HASH_CHARS)

            def ids(pipe, found=found):
                for lane, k in found:
                    pipe.getrange(id_keys[lane], k * width, (k + 1) * width - 1)
                pipe.hmget(pk.ixs, versions)
            replies = yield pipeline(ids)
            if replies[-1] == before:
                return sorted({r.decode("ascii", "replace") for r in replies[:-1]})
        return None


def _by_entries(ids: list[str], hashes: list) -> list[tuple[list[str], list]]:
    """(ids, hashes) in pieces of at most LIST_ENTRIES entries (one message never split): index.lua
    checks and copies each entry, ~1.4 us apiece on the 2-core test machine."""
    pieces: list[tuple[list[str], list]] = []
    count = LIST_ENTRIES
    for msg_id, found in zip(ids, hashes, strict=True):
        entries = len(found) // INDEX_HASH_CHARS      # (a message's Hashes: 8 letters an entry)
        if count + entries > LIST_ENTRIES:
            pieces.append(([], []))
            count = 0
        pieces[-1][0].append(msg_id)
        pieces[-1][1].append(found)
        count += entries
    return pieces
