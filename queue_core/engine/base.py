"""What every family of engine operations stands on: construction (``from_url``), the driver hook
(``_drive``: blocking or asyncio), replica waits, keys, the layout cache, Redis's clock, reading a
topic's or group's configuration, and the small helpers every family uses. The families
(publish, consume, operate, configure, read, stats) each derive from EngineBase and call only
what is defined here or in themselves; queue.py composes them into the two clients."""

import json
import logging
import math
import os
import socket
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from json.encoder import c_make_encoder, encode_basestring
from typing import Any

import redis

from .. import connect
from ..config import GroupConfig, TopicConfig
from ..errors import (
    Code,
    InvalidArgument,
    NotReplicated,
    PayloadNotSerializable,
    raise_for_code,
)
from ..keys import (
    DEFAULT_GROUP,
    KeyCache,
    Keys,
    topics_registry_key,
    validate_group,
)
from ..layout import LayoutCache, Router, TopicLayout
from ..scripts import Scripts, is_cluster, pipeline_steps
from ..steps import cmd, operation, pipeline, script

LAYOUT_TTL = 2.0         # seconds a cached layout is trusted for reads (publish checks it anyway)
BATCH_MARK = b"batch\n"  # starts the last element of a script's reply that fired batch callbacks (includes/batch.lua)

log = logging.getLogger(__name__)


def batch_fired(reply, place: tuple[str, int], fired: set) -> list:
    """A script's reply without the element lua/includes/batch.lua's batch_mark() adds when the
    call fired batch callbacks; each outbox entry it names joins ``fired`` as (topic, partition,
    entry)."""
    if reply and isinstance(reply[-1], bytes) and reply[-1].startswith(BATCH_MARK):
        fired.update((*place, e.decode()) for e in reply[-1][len(BATCH_MARK):].split(b"\n"))
        return reply[:-1]
    return reply


# json.dumps with any argument builds a JSONEncoder, and every encode a C encoder (~4.5 us a small
# payload on this machine's Python 3.13, a fifth of a published message's client time): one C
# encoder, made as JSONEncoder(separators=(",", ":"), ensure_ascii=False) makes it, kept (1.5 us).
# Without the per-call circular check (its markers would outlive a failed call): a circular
# payload recurses until RecursionError, refused as such.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
try:
    _C_ENCODER = c_make_encoder(None, _JSON.default, encode_basestring, _JSON.indent, _JSON.key_separator,
                                _JSON.item_separator, _JSON.sort_keys, _JSON.skipkeys, _JSON.allow_nan)
except TypeError:   # no C accelerator (c_make_encoder is None), or another signature
    _C_ENCODER = None


def _encode_json(payload: Any) -> str:
    return _JSON.encode(payload) if _C_ENCODER is None else "".join(_C_ENCODER(payload, 0))


def to_bytes(payload: Any) -> bytes:
    """A payload as stored: bytes as they are, str as UTF-8, anything else as compact JSON."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, (bytearray, memoryview)):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode("utf-8")
    try:
        return _encode_json(payload).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadNotSerializable(
            f"payload of type {type(payload).__name__} is not bytes, str or JSON-serialisable ({exc}); "
            "serialise it yourself and publish bytes") from exc


def as_seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{what} must be a finite number of seconds (got {seconds})")
    if seconds < 0:
        raise InvalidArgument(f"{what} cannot be negative (got {seconds} s)")
    return seconds


def as_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decode_fields(raw: dict) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


class EngineBase:
    """The operations of a Redis delay queue are written once (queue_core.steps) for two clients:
    DelayQueue (blocking) and AsyncDelayQueue (asyncio), both in queue_core.queue.

    ``actor`` names who acts (recorded in history and events); operator actions pass their own.

    ``wait_replicas``: every call that creates messages (publish, replay, replay_dead,
    replay_edited) returns only once that many replicas acknowledged its writes (Redis WAIT, at
    most ``wait_timeout`` seconds), else raises NotReplicated. Not on Redis Cluster.
    """

    def __init__(self, client: "redis.Redis", prefix: str = "dq", actor: str | None = None, *,
                 wait_replicas: int = 0, wait_timeout: float = connect.DEFAULT_WAIT_TIMEOUT):
        if not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise InvalidArgument(f"wait_replicas must be a whole number >= 0 (got {wait_replicas!r})")
        if wait_replicas and not 0 < wait_timeout <= 3600:
            raise InvalidArgument(f"wait_timeout must be between 0 and 3600 seconds (got {wait_timeout!r}); "
                                  "Redis's WAIT with no timeout would block the caller forever")
        self.redis = client
        self.prefix = prefix
        self.actor = actor or f"{socket.gethostname()}:{os.getpid()}"
        self.scripts = Scripts(client)
        self.cluster = is_cluster(client)
        self._keys = KeyCache(prefix)
        self._layouts = LayoutCache()
        self._router = Router()
        self._registered: set[str] = set()
        if wait_replicas and self.cluster:
            raise InvalidArgument("wait_replicas is not supported on Redis Cluster (a WAIT must follow the write on "
                                  "the same shard's connection); use a single master with replicas or Sentinel")
        self.wait_replicas = wait_replicas
        self.wait_timeout = wait_timeout

    _asyncio = False   # which redis-py client from_url builds

    @classmethod
    def from_url(cls, url: str, prefix: str = "dq", actor: str | None = None, *, wait_replicas: int | None = None,
                 wait_timeout: float | None = None, tls: dict | None = None, **redis_kwargs):
        """``redis://``, ``rediss://`` or ``unix://`` URL; ``redis+cluster://host:port`` for Redis
        Cluster; ``redis+sentinel://host:port[,host:port...]/service[/db]`` for Sentinel (see
        queue_core.connect). ``wait_replicas``/``wait_timeout`` override the URL's options of the
        same names; ``tls`` holds TLS options from settings (queue_core.connect.tls_options)."""
        target = connect.parse(url)
        client = connect.connect(target, tls=tls, asyncio=cls._asyncio, **redis_kwargs)
        return cls(client, prefix=prefix, actor=actor,
                   wait_replicas=target.wait_replicas if wait_replicas is None else wait_replicas,
                   wait_timeout=target.wait_timeout if wait_timeout is None else wait_timeout)

    def _drive(self, steps):
        raise NotImplementedError   # DelayQueue runs operations to their result, AsyncDelayQueue awaits them

    def _add_wait(self, pipe) -> None:
        # WAIT counts the writes of the connection it is sent on, so it rides in the same pipeline.
        pipe.execute_command("WAIT", self.wait_replicas, max(1, round(self.wait_timeout * 1000)))

    def _write(self, picker, keys: list, args: list):
        """A script call that creates messages: (its reply, replicas that acknowledged it, or None
        when not waiting). Check the count with _require_replicas once the reply is read."""
        if not self.wait_replicas:
            return (yield script(picker, keys, args)), None

        def fill(pipe):
            picker.add_to(pipe, keys, args)
            self._add_wait(pipe)
        reply, acked = yield from pipeline_steps(fill, [picker])
        return reply, int(acked)

    def _require_replicas(self, acked: int | None, what: str, ids: Sequence[str] = ()) -> None:
        if acked is None or acked >= self.wait_replicas:
            return
        raise NotReplicated(
            f"{what} reached the master but only {acked} of {self.wait_replicas} replica(s) acknowledged it within "
            f"{self.wait_timeout:g} s. It exists on the master and is handled as usual unless the master fails "
            "before its replicas catch up. Check the replicas (INFO replication); publishing again with the same "
            "key is safe", acked=acked, wanted=self.wait_replicas, ids=ids)

    def keys(self, topic: str, partition: int = 0, group: str = DEFAULT_GROUP) -> Keys:
        """The keys of one partition and one group of ``topic`` (validates both names)."""
        return self._keys.get(topic, partition, group)

    def _layout(self, topic: str, *, fresh: bool = False):
        """The topic's partition count and groups. One round trip unless cached (2 s)."""
        now = time.monotonic()
        cached = None if fresh else self._layouts.get(topic, now, LAYOUT_TTL)
        if cached is not None:
            return cached
        layout = TopicLayout.parse(*(yield cmd("hmget", self.keys(topic).config, ["layout", "indexes"])))
        self._layouts.put(topic, layout, now)
        return layout

    layout = operation(_layout)

    def _layouts_of(self, topics: Iterable[str], *, fresh: bool = False):
        """The layouts of many topics: the cached ones (2 s) as they are unless ``fresh``, the rest
        in one pipelined round trip."""
        now = time.monotonic()
        found = {t: None if fresh else self._layouts.get(t, now, LAYOUT_TTL) for t in dict.fromkeys(topics)}
        missing = [t for t, layout in found.items() if layout is None]
        if missing:
            def fill(pipe):
                for t in missing:
                    pipe.hmget(self.keys(t).config, ["layout", "indexes"])
            for t, raw in zip(missing, (yield pipeline(fill)), strict=True):
                found[t] = TopicLayout.parse(*raw)
                self._layouts.put(t, found[t], now)
        return found

    layouts = operation(_layouts_of, "layouts")

    def _group_keys(self, topic: str, group: str, partition: int) -> Keys:
        validate_group(group)
        return self.keys(topic, partition, group)

    def _registry_key(self) -> str:
        return topics_registry_key(self.prefix)

    def _register(self, topic: str, always: bool = False):
        # The registry lives outside the topic's hash tags, so it is written by a plain command rather
        # than inside a (single-slot) script. publish() writes it once per topic per process;
        # configuration calls (rare) always do, so a lost registry is rebuilt.
        if always or topic not in self._registered:
            yield cmd("sadd", self._registry_key(), topic)
            self._registered.add(topic)

    def _partitions(self, topic: str):
        return range((yield from self._layout(topic)).partitions)

    def _due_args(self, delay: float | timedelta, at: datetime | None) -> list:
        if at is not None:
            if delay:
                raise InvalidArgument("give either delay= or at=, not both")
            if at.tzinfo is None:
                raise InvalidArgument("at= must be timezone-aware (e.g. datetime.now(UTC) + ...); "
                                      "a naive datetime is ambiguous")
            return ["at", int(at.timestamp() * 1000)]
        return ["delay", int(as_seconds(delay, "delay") * 1000)]

    def _forward_fired(self, fired: set):
        """Forward the batch callbacks the calls just made fired (engine/batch.py), so they reach
        their topic now rather than at a worker's next heartbeat: those entries only, never the
        rest of the outbox (which the workers forward). The call that fired them has succeeded: a
        failure here is logged, and the outbox keeps them for the next forwarder."""
        places: dict[tuple[str, int], list[str]] = {}
        for topic, p, entry in sorted(fired):
            places.setdefault((topic, p), []).append(entry)
        for (topic, p), entries in places.items():
            try:
                yield from self._forward_batch_callbacks(topic, partitions=[p], entries=entries)
            except redis.RedisError as exc:
                log.warning("batch callbacks of %s (partition %d) not forwarded yet: %s", topic, p, exc)

    def _server_ms(self):
        """Redis's clock, in ms. One round trip."""
        sec, usec = yield cmd("time")
        return sec * 1000 + usec // 1000

    server_ms = operation(_server_ms)

    def _run_many(self, picker, calls: list[tuple]):
        if len(calls) == 1 or self.cluster:
            replies = []
            for keys, args, *_ in calls:
                replies.append((yield script(picker, keys, args)))
            return replies

        def fill(pipe):
            for keys, args, *_ in calls:
                picker.add_to(pipe, keys, args)
        return (yield from pipeline_steps(fill, [picker] * len(calls)))

    @staticmethod
    def _pipeline(fills: list, script_calls: list = ()):
        """Run each ``fill(pipe)`` of ``fills`` in one pipeline: one round trip (per node).
        ``script_calls``: the _KeyPicker of each script call the fills queue by SHA; they are
        loaded and the pipeline run again when the server lacks them (scripts.pipeline_steps)."""
        def fill_all(pipe):
            for fill in fills:
                fill(pipe)
        return (yield from pipeline_steps(fill_all, list(script_calls)))

    def _topic_config(self, topic: str):
        """The topic's configuration with its default group's settings (defaults for fields never
        written). Two round trips (pipelined)."""
        k = self.keys(topic)

        def fill(pipe):
            pipe.hgetall(k.config)
            pipe.hgetall(self.keys(topic, 0, DEFAULT_GROUP).g.config)
        topic_raw, group_raw = yield pipeline(fill)
        topic_fields = set(TopicConfig().topic_fields()) | {"layout"}
        fields = {**decode_fields(group_raw), **{k: v for k, v in decode_fields(topic_raw).items() if k in topic_fields}}
        fields["partitions"] = str(TopicLayout.parse(fields.get("layout")).partitions)
        known = TopicConfig().to_fields()
        return TopicConfig.from_fields({k: v for k, v in fields.items() if k in known})

    topic_config = operation(_topic_config)

    def _group_config(self, topic: str, group: str = DEFAULT_GROUP):
        """The group's configuration (defaults for fields never written). One round trip."""
        validate_group(group)
        return GroupConfig.from_fields(decode_fields((yield cmd("hgetall", self.keys(topic, 0, group).g.config))))

    group_config = operation(_group_config)

    @staticmethod
    def _raise_state(code: int, topic: str, msg_id: str, expected: str) -> None:
        if code == Code.STATE_CONFLICT:
            raise_for_code(code, topic, f"{msg_id} is not {expected}")
        raise_for_code(code, topic, msg_id)

    def _publish_keys(self, topic: str, layout, p: int) -> list[str]:
        """A partition's keys and every group's block, in the layout's order: what publish.lua
        (and the scripts that publish or look through every group: schedule_tick, find) take."""
        k = self.keys(topic, p)
        keys = [getattr(k.p, n) for n in k.p.__slots__]
        for group in layout.groups:
            g = self.keys(topic, p, group).g
            keys += [getattr(g, n) for n in g.__slots__]
        return keys
