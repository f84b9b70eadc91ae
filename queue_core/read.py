"""The read model: counts, pages and lookups. Nothing here changes Redis. Each docstring states
the cost, so the dashboard can be kept cheap at a million messages."""

import json
from dataclasses import dataclass
from datetime import datetime

from .keys import TopicKeys, archiver_lock_key, topics_registry_key
from .message import Message, ms_to_dt
from .states import ALL_STATES, MessageState


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    fingerprint: str
    count: int
    error_type: str
    sample_message: str
    sample_id: str
    first_seen: datetime | None
    last_seen: datetime | None


@dataclass(frozen=True, slots=True)
class Page:
    messages: list[Message]
    next_cursor: str | None   # pass as ``after`` for the next page; None at the end


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class QueueReader:
    """Mixed into DelayQueue; expects ``self.redis``, ``self.scripts`` and ``self.keys()``."""

    def topics(self) -> list[str]:
        """Every topic configured or published to. One round trip, O(topics)."""
        return sorted(_text(t) for t in self.redis.smembers(topics_registry_key(self.prefix)))

    def undocumented_keys(self, scan_count: int = 1000) -> list[str]:
        """Keys under this queue's prefix that are not in the documented layout (TopicKeys of a
        registered topic, the registry, the archiver's lock): what a leak would look like. Walks
        SCAN, so Redis is never blocked; O(keys under the prefix)."""
        documented = {topics_registry_key(self.prefix), archiver_lock_key(self.prefix)}
        for topic in self.topics():
            documented.update(self.keys(topic).as_list())
        found = (_text(k) for k in self.redis.scan_iter(match=f"{self.prefix}:*", count=scan_count))
        return sorted(k for k in found if k not in documented)

    def counts(self, topic: str) -> dict[MessageState, int]:
        """Messages per state, one atomic snapshot. One round trip, O(1)."""
        k = self.keys(topic)
        values = self.scripts.counts(keys=[k.state(s) for s in ALL_STATES])
        return dict(zip(ALL_STATES, (int(v) for v in values), strict=True))

    def get(self, topic: str, msg_id: str) -> Message | None:
        """One message with state, payload, history and last error, or None. One round trip, O(1)."""
        k = self.keys(topic)
        state, score, meta, payload, tb = self.scripts.get(keys=k.as_list(), args=[msg_id])
        if not meta and not state:
            return None
        return self._message(topic, msg_id, state, score, meta, payload, tb)

    def peek(self, topic: str, state: MessageState | str, offset: int = 0, limit: int = 50) -> list[Message]:
        """A page of one state ordered by score (due time, lease deadline or time of death).
        One round trip, O(log n + limit) at any offset."""
        return self.page(topic, state, limit=limit, offset=offset).messages

    def page(self, topic: str, state: MessageState | str, *, limit: int = 50, after: str | None = None,
             offset: int = 0) -> Page:
        """Cursor pagination that stays O(log n + limit) at any depth; ``after`` is the previous
        page's ``next_cursor``. One round trip."""
        state = MessageState(state)
        limit = max(1, min(int(limit), 1000))
        score, after_id = ("", "")
        if after:
            score, _, after_id = after.partition("/")
        rows = self.scripts.peek(keys=self.keys(topic).as_list(),
                                 args=[state.value, int(offset), limit, score, after_id])
        messages = []
        for i in range(0, len(rows), 5):
            msg_id, sc, meta, payload, tb = rows[i:i + 5]
            messages.append(self._message(topic, _text(msg_id), state.value, sc, meta, payload, tb))
        next_cursor = None
        if len(messages) == limit:
            last = rows[len(rows) - 5:len(rows) - 3]
            next_cursor = f"{_text(last[1])}/{_text(last[0])}"
        return Page(messages, next_cursor)

    def group_page(self, topic: str, fingerprint: str, *, limit: int = 50, after: str | None = None) -> Page:
        """Dead letters of one error group, oldest death first, from the group's index (never a
        scan of the whole DLQ). ``after`` is the previous page's ``next_cursor``. Two round trips,
        O(log n + limit)."""
        k = self.keys(topic)
        limit = max(1, min(int(limit), 1000))
        low = f"({after}" if after else f"[{fingerprint}:"
        members = self.redis.zrangebylex(k.fp_index, low, f"({fingerprint};", start=0, num=limit)
        ids = [_text(m).rsplit(":", 1)[1] for m in members]
        if not ids:
            return Page([], None)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(k.meta, ids)
        pipe.hmget(k.payloads, ids)
        pipe.hmget(k.tracebacks, ids)
        pipe.zmscore(k.dead, ids)
        metas, payloads, tbs, scores = pipe.execute()
        messages = [self._message(topic, i, "dead", sc if sc is not None else -1, meta, payload, tb)
                    for i, meta, payload, tb, sc in zip(ids, metas, payloads, tbs, scores, strict=True)
                    if sc is not None]
        return Page(messages, _text(members[-1]) if len(members) == limit else None)

    def error_groups(self, topic: str, limit: int = 100) -> list[ErrorGroup]:
        """Dead-letter groups by error fingerprint, largest first. One round trip, O(groups)."""
        k = self.keys(topic)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(k.fp_count)
        pipe.hgetall(k.fp_info)
        counts, infos = pipe.execute()
        groups = []
        for fp, count in counts.items():
            info = json.loads(infos.get(fp, b"{}") or b"{}")
            groups.append(ErrorGroup(_text(fp), int(count), info.get("t", ""), info.get("m", ""),
                                     info.get("sample", ""), ms_to_dt(info.get("first_seen")),
                                     ms_to_dt(info.get("last_seen"))))
        groups.sort(key=lambda g: (-g.count, g.fingerprint))
        return groups[:limit]

    def dead_count(self, topic: str, fingerprint: str | None = None, since_ms: int = 0,
                   until_ms: int | None = None) -> int:
        """Dead letters (of one error group) that died in [since_ms, until_ms]. One round trip,
        O(log n): the same range replay_dead walks."""
        k = self.keys(topic)
        until = "+inf" if until_ms is None else until_ms
        if not fingerprint:
            return int(self.redis.zcount(k.dead, since_ms, until))
        upper = f"[{fingerprint}:{until_ms:015d};" if until_ms is not None else f"({fingerprint};"
        return int(self.redis.zlexcount(k.fp_index, f"[{fingerprint}:{since_ms:015d}", upper))

    def stats(self, topic: str) -> dict[str, int]:
        """Lifetime counters (published, claimed, acked, nacked, expired, dead, replayed, evicted,
        cancelled, deleted). One round trip, O(1)."""
        raw = self.redis.hgetall(self.keys(topic).stats)
        return {_text(k): int(v) for k, v in raw.items() if _text(k) != "seq"}

    def workers(self, topic: str, within: float = 30.0) -> list[str]:
        """Worker ids that sent a heartbeat for this topic in the last ``within`` seconds, by
        Redis's clock. Two round trips (TIME, then the range), O(log n + workers)."""
        k = self.keys(topic)
        ids = self.redis.zrangebyscore(k.workers, self.server_ms() - within * 1000, "+inf")
        return [_text(i) for i in ids]

    def throughput(self, topic: str) -> dict:
        """Events per minute from the topic's per-minute counters: published, acked and dead
        (dead-letter inflow) over the last minute and the last hour, the oldest ready message's
        due time and the live workers. One round trip (pipelined), O(60)."""
        k = self.keys(topic)
        now_ms = self.server_ms()
        minute = now_ms // 60_000
        events = ("published", "acked", "dead")
        fields = [f"{m}:{e}" for m in range(minute - 60, minute + 1) for e in events]
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(k.minutes, fields)
        pipe.zrange(k.ready, 0, 0, withscores=True)
        pipe.zcount(k.workers, now_ms - 30_000, "+inf")
        values, oldest, workers = pipe.execute()
        per_minute = {e: [0] * 61 for e in events}
        for i, v in enumerate(values):
            if v:
                per_minute[events[i % 3]][i // 3] = int(v)
        # the current minute is partial: "last minute" is the last complete one plus the partial one
        # weighted, which keeps the figure steady instead of dropping to 0 at each minute boundary
        frac = (now_ms % 60_000) / 60_000
        out = {"now_ms": now_ms, "workers": int(workers),
               "oldest_ready_age_s": (now_ms - oldest[0][1]) / 1000 if oldest else None}
        for e in events:
            series = per_minute[e]
            out[f"{e}_last_minute"] = round(series[-1] + series[-2] * (1 - frac))
            out[f"{e}_last_hour"] = sum(series[1:])
        return out

    def _message(self, topic, msg_id, state, score, meta, payload, tb) -> Message:
        st = MessageState(_text(state)) if state else None
        return Message.from_redis(topic, _text(msg_id), meta or b"", payload,
                                  state=st, score=float(score) if st else None,
                                  traceback=_text(tb) if tb else "")

    # Subclasses provide these.
    prefix: str

    def keys(self, topic: str) -> TopicKeys:  # pragma: no cover - overridden
        raise NotImplementedError

    def server_ms(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError
