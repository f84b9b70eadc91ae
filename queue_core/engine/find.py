"""Finding messages: ``find`` (one message from anywhere, by id, id prefix or dedup key; lua/find.lua)
and ``search`` (the messages of one state that match a query; lua/search.lua). Both read only and
both are bounded: every script call spends at most a few milliseconds of Redis, every operation
at most its budget in wall time, and each says how far it got instead of pretending it looked
everywhere."""

import base64
import bisect
import re
import time
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import InvalidArgument
from ..keys import (
    DEFAULT_GROUP,
    partition_of,
)
from ..message import Message, ms_to_dt
from ..query import Query, QueryError, parse
from ..states import MessageState
from ..steps import cmd, operation, pipeline, script
from .base import as_text
from .index import INDEX_CANDIDATES_MOST
from .read import Read, _score_text

FULL_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}(?:\.[0-9]{1,4})?$")
ID_PREFIX = re.compile(r"^[0-9A-HJKMNP-TV-Z]{4,25}$")
MAX_FIND_CHARS = 300
# An indexed search hands search.lua at most INDEX_CALL_MOST candidates a call (its candidates:
# engine/index.py _index_candidates).
INDEX_CALL_MOST = 1000
CALL_BUDGET_MS = 3.0        # Redis time one script call may spend (search.lua, find.lua's walk)
SEARCH_BUDGET_S = 2.0       # wall time one page of search may spend
# The share of Redis's time one search may take: after each call it waits so that its calls fill
# at most this fraction of the page's time. Redis runs one script at a time, so workers that keep
# it busy lose whatever scans take: at 0.2 two scans cost a draining worker ~40 %, so 0.05 (two
# scans ~10 %), at the cost of scanning less per page (bench/RESULTS.md, "Search beside workers").
REDIS_SHARE = 0.05
FIND_BUDGET_S = 1.0
HSCAN_COUNT = 500           # hash entries one HSCAN call looks at (an id-prefix find)
_SEARCH_CURSOR = re.compile(r"^([mi])/(-?[0-9][0-9.e+-]{0,30})/([0-9A-Za-z._~-]{0,80})/([0-9]{1,9})$")
_START, _END = float("-inf"), float("inf")   # a walk's position before its first member (ascending, descending)


@dataclass(frozen=True, slots=True)
class Location:
    """Where a message is: a state of one group."""
    topic: str
    group: str
    partition: int
    id: str
    state: MessageState
    score: float


@dataclass(frozen=True, slots=True)
class Sighting:
    """An event of the stream that names a message no group holds any more."""
    topic: str
    group: str | None            # None: published (to every group)
    partition: int
    id: str
    event: str
    at: datetime | None
    actor: str


@dataclass(slots=True)
class FindResult:
    text: str
    found: list[Location] = field(default_factory=list)
    seen: list[Sighting] = field(default_factory=list)
    complete: bool = True          # False: the budget ran out before every place was looked at
    gaps: list[str] = field(default_factory=list)   # what was not looked at, in words


@dataclass(frozen=True, slots=True)
class SearchPage:
    messages: list[Message]
    next_cursor: str | None       # pass as ``after`` to continue; None once the scan is over
    scanned: int                  # members examined since the scan began (this page included)
    total: int                    # members of the state (in the time range) now
    matched: int                  # matches since the scan began (this page included)
    done: bool


class Quota:
    """How much one script call may do (members to examine, stream entries to read), sized from
    how long the previous calls took so that each takes about ``target_s``. The script's own
    clock cannot bound it everywhere: Valkey answers TIME inside a script with the script's start
    time. Each step moves halfway to the size that would have hit the target, so one call slowed
    by a busy machine does not collapse the next."""

    def __init__(self, target_s: float, start: int, low: int, high: int):
        self.target_s, self.size, self.low, self.high = target_s, start, low, high

    def took(self, seconds: float) -> None:
        ideal = self.size * self.target_s / max(seconds, 1e-4)
        self.size = int(min(self.high, max(self.low, (self.size + ideal) / 2)))


class Pacer:
    """How long a search waits after each call. It takes at least ``floor`` of Redis's time, and
    more while Redis is nearly idle: every SAMPLE_S it reads Redis's CPU time (INFO cpu) and takes
    out what its own calls took; what the others use, from none to BUSY, moves the share from 1
    down to the floor. Redis runs one script at a time, so a worker's every command waits for a
    scan's call in progress: beside active workers (already at a fifth of Redis: a claim/ack loop
    keeps it half busy) a scan keeps to the floor; on an idle server it runs nearly flat out."""

    SAMPLE_S = 0.25
    BUSY = 0.2

    def __init__(self, floor: float, adaptive: bool):
        self.floor = self.share = floor
        self.adaptive = adaptive
        self.at: float | None = None
        self.cpu = 0.0
        self.ours = 0.0            # seconds our calls took since the last sample (round trips: an overestimate)

    def called(self, seconds: float) -> None:
        self.ours += seconds

    def due(self, now: float) -> bool:
        return self.adaptive and (self.at is None or now - self.at >= self.SAMPLE_S)

    def sample(self, now: float, cpu_seconds: float) -> None:
        if self.at is not None and now > self.at:
            span = now - self.at
            others = max(0.0, (cpu_seconds - self.cpu) / span - self.ours / span)
            self.share = self.floor + (1.0 - self.floor) * max(0.0, 1.0 - others / self.BUSY)
        self.at, self.cpu, self.ours = now, cpu_seconds, 0.0

    def wait(self, call_seconds: float) -> float:
        return call_seconds * (1 / self.share - 1)


# JSON one search call may decode: cjson decodes ~150-300 MB/s here, so ~1.5 ms of a 3 ms call.
DECODE_BYTES_PER_MS = 100_000


def _search_cursor(position: tuple[float, str], matched: int, indexed: bool = False) -> str:
    inner = f"{'i' if indexed else 'm'}/{_score_text(position[0])}/{position[1]}/{matched}"
    return base64.urlsafe_b64encode(inner.encode()).decode().rstrip("=")


def _read_search_cursor(after: str | None) -> tuple[str, str, int, bool] | None:
    """(score, id, matched, walks an index) of a search cursor, or None for none."""
    if not after:
        return None
    try:
        if len(after) > 300:
            raise ValueError
        m = _SEARCH_CURSOR.match(base64.urlsafe_b64decode(after + "=" * (-len(after) % 4)).decode())
        if m is None:
            raise ValueError
        float(m[2])
    except ValueError:
        raise InvalidArgument(f"malformed search cursor {after[:60]!r}: follow the previous page's 'continue' "
                              "link, or start the search again") from None
    return m[2], m[3], int(m[4]), m[1] == "i"


class Find(Read):
    """find and search."""

    def _find(self, text: str, *, topic: str | None = None, limit: int = 20, budget_s: float = FIND_BUDGET_S):
        """Where the message named by ``text`` is, in every topic (or ``topic``), group and
        partition: ``text`` is an id, an id prefix (4+ characters of one) or a dedup key. When no
        group holds an id any more, the event stream says where it was last seen (acked, dead,
        evicted...) while the stream keeps it. Costs: an id, one find.lua call per topic; a key,
        one pipelined HMGET per topic; a prefix, HSCAN over the topics' records (HSCAN_COUNT per
        call); a sighting, find.lua walking the stream back (<= CALL_BUDGET_MS per call). All of it
        stops at ``budget_s``; ``complete`` and ``gaps`` say what was left."""
        text = (text or "").strip()
        if not text or len(text) > MAX_FIND_CHARS or not text.isprintable():
            raise InvalidArgument(f"give an id, an id prefix or a dedup key (1 to {MAX_FIND_CHARS} printable "
                                  "characters)")
        deadline = time.monotonic() + budget_s
        limit = max(1, min(int(limit), 100))
        topics = [topic] if topic else (yield from self._topics())
        layouts = yield from self._layouts_of(topics, fresh=True)   # one round trip; a group added a second ago counts
        result = FindResult(text)
        candidates: dict[tuple[str, str], None] = {}
        upper = text.upper()
        if FULL_ID.match(upper):
            for t in topics:
                if partition_of(upper) < layouts[t].partitions:
                    candidates[(t, upper)] = None
        by_key = yield from self._ids_by_key(topics, layouts, text)
        for t, msg_id in by_key:
            candidates[(t, msg_id)] = None
        if ID_PREFIX.match(upper) and len(candidates) < limit:
            found = yield from self._ids_by_prefix(topics, layouts, upper, limit - len(candidates), deadline, result)
            for t, msg_id in found:
                candidates[(t, msg_id)] = None
        for t, msg_id in list(candidates)[:limit]:
            result.found += (yield from self._where(t, layouts[t], msg_id))
        if FULL_ID.match(upper):
            # Groups that no longer hold the id: its topic's if it is found somewhere (ids are
            # unique), every topic's if nowhere. The stream says what happened to it there.
            held = {(f.topic, f.group) for f in result.found}
            places = {f.topic for f in result.found} or set(topics)
            p = partition_of(upper)
            for t in sorted(places):
                gone = [g for g in layouts[t].groups if (t, g) not in held]
                if gone and p < layouts[t].partitions:
                    seen = yield from self._seen(t, p, upper, deadline, result)
                    result.seen += [s for s in seen if s.group is None or s.group in gone]
        return result

    find = operation(_find)

    def _ids_by_key(self, topics, layouts, key: str):
        """(topic, id) of the messages holding dedup key ``key`` (live, or done while a dedup window
        keeps the key: the caller looks each id up, so a done one is not reported found): one
        pipelined round trip."""
        places = [(t, p) for t in topics for p in range(layouts[t].partitions)]
        if not places:
            return []

        def fill(pipe):
            for t, p in places:
                pipe.hget(self.keys(t, p).dedup, key)
        return [(t, as_text(i)) for (t, _p), i in zip(places, (yield pipeline(fill)), strict=True) if i]

    def _ids_by_prefix(self, topics, layouts, prefix: str, limit: int, deadline: float, result: FindResult):
        """Up to ``limit`` (topic, id) whose id starts with ``prefix``: HSCAN over the records, each
        call looking at HSCAN_COUNT entries, until ``deadline``."""
        found = []
        for t in topics:
            for p in range(layouts[t].partitions):
                cursor = 0
                while True:
                    if time.monotonic() >= deadline:
                        result.complete = False
                        result.gaps.append(f"the id-prefix search stopped at {t} partition {p} (time budget)")
                        return found
                    cursor, entries = yield cmd("hscan", self.keys(t, p).msgs, cursor, match=f"{prefix}*",
                                                count=HSCAN_COUNT)
                    found += [(t, as_text(e)) for e in entries]
                    if len(found) >= limit:
                        return found[:limit]
                    if not int(cursor):
                        break
        return found

    def _where(self, topic: str, layout, msg_id: str):
        """Every group's state of one message (find.lua 'where'): one call."""
        p = partition_of(msg_id)
        keys = self._publish_keys(topic, layout, p)
        reply = yield script(self.scripts.find, keys, ["where", msg_id])
        out = []
        for group, state, score in zip(layout.groups, reply[1::2], reply[2::2], strict=True):
            if state:
                out.append(Location(topic, group, p, msg_id, MessageState(as_text(state)), float(score)))
        return out

    def _seen(self, topic: str, p: int, msg_id: str, deadline: float, result: FindResult):
        """The stream's entries naming ``msg_id``, newest first (find.lua 'seen', called again from
        where it stopped until its walk is over or ``deadline``)."""
        keys = self._publish_keys(topic, (yield from self._layout(topic)), p)
        start, out = "+", []
        quota = Quota(CALL_BUDGET_MS / 1000, 500, 100, 20_000)
        while True:
            called = time.monotonic()
            reply = yield script(self.scripts.find, keys, ["seen", msg_id, start, int(CALL_BUDGET_MS * 1000),
                                                           quota.size])
            quota.took(time.monotonic() - called)
            rows = reply[2:]
            for i in range(0, len(rows), 4):
                event, group, ts, actor = (as_text(v) for v in rows[i:i + 4])
                out.append(Sighting(topic, group or None, p, msg_id, event, ms_to_dt(int(ts)) if ts else None, actor))
            start = as_text(reply[0])
            if not start:
                return out
            if time.monotonic() >= deadline:
                result.complete = False
                result.gaps.append(f"the event stream of {topic} partition {p} was not read to its start (time budget)")
                return out

    def _search(self, topic: str, state: MessageState | str, query: Query | str, *, group: str = DEFAULT_GROUP,
                partition: int | None = None, after: str | None = None, limit: int = 50,
                since_ms: int | None = None, until_ms: int | None = None, reverse: bool = False,
                budget_s: float = SEARCH_BUDGET_S, call_budget_ms: float = CALL_BUDGET_MS,
                redis_share: float = REDIS_SHARE, adaptive: bool = True, confirm=None):
        """One page of the messages of ``state`` that match ``query`` (queue_core.query), in (score,
        id) order (``reverse``: descending) over all the topic's partitions (or one ``partition``),
        merged; ``since_ms``/``until_ms`` bound the scores. A bounded scan: each search.lua call
        spends at most ``call_budget_ms`` of Redis, the page at most ``budget_s``; the page then
        ends with fewer than ``limit`` matches and a ``next_cursor`` to continue. ``confirm(message)``,
        when given, must also hold for a match to count (the dashboard checks the redacted view there).
        ``redis_share`` (0 < share <= 1): after each call the search waits long enough that its
        calls fill at most that share of the time (1: no wait); ``adaptive`` lets it take more
        while Redis has time to spare (Pacer; not on a cluster client, whose INFO spans nodes).

        The partitions are walked side by side, the one furthest behind first (on a cluster each
        call stays on its partition's node): a match is returned once every partition has been
        walked up to it, so the merged order holds, and the cursor is that one position for all
        partitions. ``scanned`` is how many members of the state (in the time range) lie up to that
        position's score (so it can stand still across pages inside a run of equal scores, as one
        publish_many makes), ``matched`` the matches returned since the scan began (in the cursor)."""
        state = MessageState(state)
        if isinstance(query, str):
            query = parse(query)
        if not query.terms:
            raise QueryError("a search needs at least one field:value term (a single word names one message: "
                             "use get or find)")
        limit = max(1, min(int(limit), 1000))
        if not 0 < redis_share <= 1:
            raise InvalidArgument(f"redis_share must be in (0, 1], not {redis_share!r}")
        deadline = time.monotonic() + budget_s
        parts = [partition] if partition is not None else list((yield from self._partitions(topic)))
        # A position is (score, id) in the walk's order; the start is before every member in range.
        start = (_END if reverse else _START, "")
        if reverse and until_ms is not None:
            start = (float(int(until_ms) + 1), "")
        elif not reverse and since_ms is not None:
            start = (float(int(since_ms) - 1), "~")
        end_score = "" if (since_ms if reverse else until_ms) is None else str(int(since_ms if reverse else until_ms))
        # An equality term on a ready indexed field reads its candidates from the index (in id
        # order) instead of walking the state; positions are then (0, id).
        prefix = yield from self._index_prefix(topic, query)
        matched = 0
        position = _read_search_cursor(after)
        if position is not None and prefix and not position[3]:
            prefix = ""   # a search that began as a scan (the index was not ready, or could not answer) stays one
        live: dict[int, list[str]] = {}   # per partition: the candidates in the state and the time range
        if prefix:
            for q in parts:
                ids = yield from self._index_candidates(topic, q, prefix)
                if ids is not None:
                    ids = yield from self._in_state(self._group_keys(topic, group, q).state(state), ids,
                                                    since_ms, until_ms)
                if ids is None or len(ids) > INDEX_CANDIDATES_MOST:
                    prefix, live = "", {}   # a value this common is found sooner by walking the state
                    break
                live[q] = ids
        if prefix:
            start = (_END if reverse else _START, "")      # the time range is checked per candidate
        if position is not None:
            score, msg_id, matched, indexed = position
            if indexed and not prefix:
                raise InvalidArgument("the index this search began with can no longer answer it (the topic's indexed "
                                      f"fields changed, or the value has more than {INDEX_CANDIDATES_MOST:,} messages "
                                      "in a partition): start it again")
            start = (float(score), msg_id)
        low = "-inf" if since_ms is None else int(since_ms)
        high = "+inf" if until_ms is None else int(until_ms)
        bounds = ["", "", ""] if not prefix else ["", "" if since_ms is None else str(int(since_ms)),
                                                  "" if until_ms is None else str(int(until_ms))]

        def behind(a, b) -> bool:      # a comes before b in the walk's order
            return (a > b) if reverse else (a < b)
        walked = dict.fromkeys(parts, start)       # how far each partition's walk has got
        finished: set[int] = set()
        found: list[tuple[float, str, Message]] = []
        terms = query.script_args()
        quota = Quota(call_budget_ms / 1000, 256, 16, 50_000)
        pacer = Pacer(redis_share, adaptive and not self.cluster and redis_share < 1)
        decode_bytes = max(4096, int(call_budget_ms * DECODE_BYTES_PER_MS))

        def frontier():
            """Every partition has been walked up to here (None: all walked to the end)."""
            open_ = [walked[p] for p in parts if p not in finished]
            if not open_:
                return None
            return max(open_) if reverse else min(open_)

        def settled():
            f = frontier()
            return [m for m in found if f is None or not behind(f, (m[0], m[1]))]
        called: set[int] = set()
        while True:
            p = None                                # the partition furthest behind
            for q in parts:
                if q not in finished and (p is None or behind(walked[q], walked[p])):
                    p = q
            k = self._group_keys(topic, group, p)
            score, msg_id = walked[p]
            given: list[str] = []
            if prefix:   # the candidates after the cursor, in the walk's order (search.lua examines them)
                ids = live[p]
                if reverse:
                    given = ids[:bisect.bisect_left(ids, msg_id)][::-1] if msg_id else ids[::-1]
                else:
                    given = ids[bisect.bisect_right(ids, msg_id):] if msg_id else list(ids)
                more = len(given) > INDEX_CALL_MOST
                given = given[:INDEX_CALL_MOST]
                bounds[0] = str(len(given))
            sent = time.monotonic()
            reply = yield script(self.scripts.search, k.as_list(), [
                state.value, "" if score in (_START, _END) or prefix else _score_text(score), msg_id,
                "1" if reverse else "", end_score, limit, int(call_budget_ms * 1000), quota.size, decode_bytes,
                *bounds, *terms, *given])
            took = time.monotonic() - sent
            quota.took(took)
            pacer.called(took)
            _examined, last_done, last_score, last_id = reply[:4]
            if last_id:
                walked[p] = (float(last_score), as_text(last_id))
            if last_done and not (prefix and more):
                finished.add(p)
            rows = reply[4:]
            for i in range(0, len(rows), 9):
                mid, sc, record, info, att, lease, tb, disp, holder = rows[i:i + 9]
                m = self._message(topic, group, p, mid, state.value, sc, record, info, att, lease, tb, holder, disp)
                if confirm is None or confirm(m):
                    found.append((0.0 if prefix else float(sc), m.id, m))
            called.add(p)
            if len(finished) == len(parts):
                break
            # Every partition is walked at least once a page, so the frontier (and the cursor) moves
            # on even when one call is all the budget allows.
            if called >= set(parts) - finished and (len(settled()) >= limit or time.monotonic() >= deadline):
                break
            now = time.monotonic()
            if pacer.due(now):
                cpu = yield cmd("info", "cpu")
                pacer.sample(time.monotonic(), float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]))
            if pacer.share < 1:
                yield self._idle(min(pacer.wait(took), max(0.0, deadline - now)))
        ready = sorted(settled(), key=lambda m: (m[0], m[1]), reverse=reverse)
        page, rest = ready[:limit], ready[limit:]
        f = frontier()
        done = f is None and not rest
        # The next page starts after the last row shown, or after the frontier when every match up
        # to it is shown (None: the end).
        stop = (page[-1][0], page[-1][1]) if len(page) == limit and (rest or f is not None) else f
        matched += len(page)

        if prefix:
            # The candidates in the state and the time range as this page began, and those up to
            # the stop (by id: exact).
            total = sum(len(ids) for ids in live.values())
            scanned = total if stop is None else sum(
                len(ids) - bisect.bisect_left(ids, stop[1]) if reverse else bisect.bisect_right(ids, stop[1])
                for ids in live.values())
        else:
            def count(pipe):
                for q in parts:
                    pipe.zcount(self._group_keys(topic, group, q).state(state), low, high)
                    if stop is not None:    # by score: members that share the stop's score count as scanned
                        edge = _score_text(stop[0])
                        pipe.zcount(self._group_keys(topic, group, q).state(state),
                                    *((edge, high) if reverse else (low, edge)))
            counts = [int(n) for n in (yield pipeline(count))]
            width = 2 if stop is not None else 1
            total = sum(counts[0::width])
            scanned = total if stop is None else min(total, sum(counts[1::width]))
        cursor = None if done else _search_cursor(stop, matched, bool(prefix))
        return SearchPage([m for _s, _i, m in page], cursor, scanned, total, matched, done)

    search = operation(_search)

    def _in_state(self, key: str, ids: list[str], since_ms: int | None, until_ms: int | None):
        """Those of ``ids`` (sorted) in the state ZSET ``key`` with a score in the time range:
        ZMSCORE in calls of INDEX_CALL_MOST, pipelined."""
        if not ids:
            return []

        def fill(pipe):
            for i in range(0, len(ids), INDEX_CALL_MOST):
                pipe.zmscore(key, ids[i:i + INDEX_CALL_MOST])
        scores = [s for chunk in (yield pipeline(fill)) for s in chunk]
        low = float("-inf") if since_ms is None else int(since_ms)
        high = float("inf") if until_ms is None else int(until_ms)
        return [i for i, s in zip(ids, scores, strict=True) if s is not None and low <= s <= high]

    def _idle(self, seconds: float):
        """A step that waits ``seconds`` without holding anything: a sleep for the blocking client,
        an awaited sleep for the asyncio one."""
        if self._asyncio:
            import asyncio

            return lambda _client: asyncio.sleep(seconds)
        return lambda _client: time.sleep(seconds)

