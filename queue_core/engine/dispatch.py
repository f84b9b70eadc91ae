"""What dispatch control is doing now (lua/includes/dispatch.lua enforces it inside the claim):
``dispatch_state`` for a group's page (its limits, what they hold back, the fairness keys with
the largest backlog) and ``held_reason`` for one ready message ("waiting: key acme at 5 per 1 s").
Read only, bounded: at most RING_LOOK fairness keys per partition are looked at."""

import hashlib
from dataclasses import dataclass, field

from ..config import GroupConfig
from ..keys import DEFAULT_GROUP, partition_of, validate_group
from ..states import MessageState
from ..steps import cmd, operation, pipeline
from .base import EngineBase, as_text

RING_LOOK = 64      # fairness keys read per partition (the ring's next turns)
GROUP_BUCKET = "\0rate"   # the group's rate bucket in fkst (lua/includes/dispatch.lua: no key has a NUL)
FILL_CURSOR = "\0fill"    # in fkst while a fill has ready messages left to list (dispatch.lua)
TOP_KEYS = 10       # keys dispatch_state reports, largest backlog first


def key_slot(key: str) -> int:
    """A fairness key's score in fkinf, as dispatch.lua's key_slot computes it: the first 12 hex
    digits of the key's SHA-1."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:12], 16)


@dataclass(frozen=True, slots=True)
class DispatchState:
    topic: str
    group: str
    config: GroupConfig
    ready: int                      # ready messages (all partitions)
    in_flight: int                  # unacked messages
    held_back: int                  # ready messages a limit holds back right now (an estimate, see below)
    reasons: dict[str, int]         # what holds them: "rate", "max_in_flight", "key_rate", "key_in_flight"
    throttled: dict[str, int]       # claims cut short by each limit, since the group began
    keys: list[tuple[str, int]] = field(default_factory=list)   # (fairness key, ready) largest first
    keys_sampled: bool = False      # True when more keys have ready messages than were looked at

    @property
    def limits(self) -> str:
        return self.config.limits_in_words()


def _bucket_tokens(raw, n: float, per_ms: float, now_ms: int) -> float:
    """A token bucket's content now (dispatch.lua's bucket(); full when never used)."""
    cap = max(1.0, -(-n // 20))
    if not raw:
        return cap
    tokens, _, last = as_text(raw).partition("|")
    return min(cap, float(tokens) + max(0, now_ms - int(last)) * n / per_ms)


class Dispatch(EngineBase):
    """dispatch_state and held_reason."""

    def _partition_reads(self, topic: str, group: str, p: int):
        k = self._group_keys(topic, group, p)

        # TIME on its own: a cluster pipeline refuses it. On a cluster it may be another node's clock;
        # what is read here is an estimate for a page, off by no more than the hosts' clock skew.
        now = yield cmd("time")

        def fill(pipe):
            pipe.zcard(k.ready)
            pipe.zcard(k.unacked)
            pipe.hgetall(k.stats)
            pipe.hget(k.fkst, GROUP_BUCKET)
            pipe.zrange(k.fring, 0, RING_LOOK - 1)
            pipe.zcard(k.fring)
            pipe.get(k.fsolo)
            pipe.hexists(k.fkst, FILL_CURSOR)
            pipe.zcard(k.fidx)
        ready, unacked, stats, bucket, ring, ring_size, solo, filling, listed = yield pipeline(fill)
        stats = {as_text(a): as_text(b) for a, b in stats.items()}
        stats[GROUP_BUCKET] = bucket
        # The ready messages of fsolo's key that are not listed (dispatch.lua): with no ring, every
        # ready message (nothing is listed for one key); with a ring, those a fill has yet to list.
        unlisted = (ready if not ring else max(0, ready - listed) if filling else 0) if solo is not None else 0
        return (k, int(now[0]) * 1000 + int(now[1]) // 1000, ready, unacked, stats, [as_text(x) for x in ring],
                ring_size, (as_text(solo), unlisted) if unlisted else None)

    def _key_reads(self, k, keys: list[str], mif_key: int | None):
        """Per key: ready listed under it, its claimed ids still in flight, its rate bucket.

        An ack removes its ids from ``fkinf``, but one that failed, was reaped or given back stays
        until the claim next checks that key at its limit (dispatch.lua's in_flight_of): each
        listed id is checked against ``unacked`` as the claim checks it (at most
        max_in_flight_per_key + 64 per key, the claim's own bound)."""
        if not keys:
            return []
        most = (mif_key or 0) + 64

        def fill(pipe):
            for key in keys:
                pipe.zlexcount(k.fidx, f"[{key}\0", f"({key}\1")
                slot = key_slot(key)
                pipe.zrangebyscore(k.fkinf, slot, slot, start=0, num=most)
                pipe.hget(k.fkst, key)
        replies = yield pipeline(fill)
        rows = [(key, [as_text(m) for m in replies[i + 1]])
                for key, i in zip(keys, range(0, len(replies), 3), strict=True)]
        listed_ids = [(key, ids) for key, ids in rows if ids]

        def check(pipe):
            for _key, ids in listed_ids:
                pipe.zmscore(k.unacked, ids)
        scores = (yield pipeline(check)) if listed_ids else []
        flying = {key: sum(score is not None for score in found)
                  for (key, _ids), found in zip(listed_ids, scores, strict=True)}
        return [(replies[i], flying.get(key, 0), replies[i + 2])
                for key, i in zip(keys, range(0, len(replies), 3), strict=True)]

    def _dispatch_state(self, topic: str, group: str = DEFAULT_GROUP):
        """The group's limits and what they hold back now, with the fairness keys that have the
        largest backlog. Three round trips per partition, O(RING_LOOK) each."""
        validate_group(group)
        cfg = yield from self._group_config(topic, group)
        layout = yield from self._layout(topic)
        nparts = layout.partitions
        ready = in_flight = held = 0
        reasons: dict[str, int] = {}
        throttled: dict[str, int] = {}
        keys: dict[str, int] = {}
        sampled = False
        for p in range(nparts):
            k, now_ms, p_ready, p_unacked, stats, ring, ring_size, solo = yield from self._partition_reads(
                topic, group, p)
            ready += p_ready
            in_flight += p_unacked
            for name, value in stats.items():
                if name.startswith("throttled:"):
                    reason = name.partition(":")[2]
                    throttled[reason] = throttled.get(reason, 0) + int(value)
            sampled = sampled or ring_size > len(ring)
            group_reason = None
            if cfg.max_in_flight:
                share = cfg.max_in_flight // nparts + (1 if p < cfg.max_in_flight % nparts else 0)
                if p_unacked >= share:
                    group_reason = "max_in_flight"
            if cfg.rate and group_reason is None:
                n = cfg.rate[0] / nparts
                if _bucket_tokens(stats[GROUP_BUCKET], n, cfg.rate[1] * 1000, now_ms) < 1:
                    group_reason = "rate"
            if group_reason and p_ready:
                held += p_ready
                reasons[group_reason] = reasons.get(group_reason, 0) + p_ready
            unlisted = dict([solo]) if solo else {}   # a solo key's messages not listed (none, or all)
            if solo and solo[0] not in ring:
                keys[solo[0]] = keys.get(solo[0], 0) + solo[1]
            key_reads = yield from self._key_reads(k, ring, cfg.max_in_flight_per_key)
            for key, (listed, flying, bucket) in zip(ring, key_reads, strict=True):
                listed = int(listed) + unlisted.get(key, 0)
                keys[key] = keys.get(key, 0) + listed
                if group_reason:
                    continue
                why = None
                if cfg.max_in_flight_per_key and int(flying) >= cfg.max_in_flight_per_key:
                    why = "key_in_flight"
                elif cfg.key_rate and _bucket_tokens(bucket, cfg.key_rate[0], cfg.key_rate[1] * 1000, now_ms) < 1:
                    why = "key_rate"
                if why and listed:
                    held += listed
                    reasons[why] = reasons.get(why, 0) + listed
        top = sorted(keys.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_KEYS]
        return DispatchState(topic, group, cfg, ready, in_flight, min(held, ready), reasons, throttled, top, sampled)

    dispatch_state = operation(_dispatch_state)

    def _held_reason(self, topic: str, msg_id: str, *, group: str = DEFAULT_GROUP):
        """Why a ready message is not being claimed, in words, or None when no limit holds it
        (or it is not ready). Read only; a few round trips."""
        msg = yield from self._get(topic, msg_id, group=group)
        if msg is None or msg.state is not MessageState.ready:
            return None
        cfg = yield from self._group_config(topic, group)
        nparts = (yield from self._layout(topic)).partitions
        p = partition_of(msg_id)
        k, now_ms, _ready, unacked, stats, _ring, _size, _solo = yield from self._partition_reads(topic, group, p)
        if cfg.max_in_flight:
            share = cfg.max_in_flight // nparts + (1 if p < cfg.max_in_flight % nparts else 0)
            if unacked >= share:
                return f"waiting: {unacked:,} in flight, the group's limit ({cfg.max_in_flight:,} in flight)"
        if cfg.rate and _bucket_tokens(stats[GROUP_BUCKET], cfg.rate[0] / nparts, cfg.rate[1] * 1000, now_ms) < 1:
            return f"waiting: the group's rate limit ({cfg.rate[0]:,} per {cfg.rate[1]:g} s)"
        key = msg.fairness_key
        if key is not None and (cfg.key_rate or cfg.max_in_flight_per_key):
            (_listed, flying, bucket), = yield from self._key_reads(k, [key], cfg.max_in_flight_per_key)
            if cfg.max_in_flight_per_key and int(flying) >= cfg.max_in_flight_per_key:
                return f"waiting: key {key} has {int(flying)} in flight (its limit is {cfg.max_in_flight_per_key})"
            if cfg.key_rate and _bucket_tokens(bucket, cfg.key_rate[0], cfg.key_rate[1] * 1000, now_ms) < 1:
                return f"waiting: key {key} at {cfg.key_rate[0]:,} per {cfg.key_rate[1]:g} s"
        return None

    held_reason = operation(_held_reason)
