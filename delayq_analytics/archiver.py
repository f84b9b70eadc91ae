"""The archiver: each topic's event stream -> Parquet files, at least once, nothing lost.

Reading goes through a Redis consumer group (``dq-archiver``) on each partition's event stream
(``dq:v2:{topic}:events`` for partition 0), so the stream itself remembers how far the archive
got. A stream entry batches the events of one script call; each becomes one row per message
(queue_core.events.explode). A batch is acknowledged (XACK) only after its
file is complete on disk: written under a hidden temp name (Spark and pyarrow skip names starting
with '.'), fsynced, renamed into place, and the directory fsynced. A crash between the rename and
the XACK leaves the entries pending for our consumer; the next run reads them again ("0" before
">") and writes them again, under the same name. Where a copy could still survive (the entry
ranges in two files' names overlap), the job drops it by (topic, event_id).

The one way to lose an event is for the stream to trim it (MAXLEN, per topic ``events_maxlen``)
before the archiver reads it: the archiver reports such entries as ``trimmed`` and the next
session's operator sees it in the log. Run the archiver often (beat: every few seconds).

Layout: ``<root>/date=YYYY-MM-DD/topic=<topic>/part-p<partition>-<first entry id>_<last entry id>.parquet``.
"""

import json
import logging
import os
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import redis

from queue_core import DelayQueue
from queue_core.events import explode
from queue_core.keys import archiver_lock_key

from .files import file_name
from .schema import ARROW_SCHEMA, INT_FIELDS, STR_FIELDS

log = logging.getLogger("delayq.archiver")

GROUP = "dq-archiver"
# One consumer name: after a crash the next run (any process) re-reads what the last one had
# read but not acknowledged. Runs never overlap: they hold archiver_lock_key.
CONSUMER = "archiver"
BATCH = 1_000      # stream entries per read; an entry holds the events of one script call (<= 250)
LOCK_MS = 120_000
MAX_WAIT = 300.0   # seconds a quiet topic's events may wait for a fuller file (beat runs)


def partition_dir(root: str, date: str, topic: str) -> str:
    # ':' is legal in a topic name but not in a Hadoop path; Spark's partition discovery
    # unescapes Hive's %XX, so the topic column reads back as written.
    return os.path.join(root, f"date={date}", "topic=" + topic.replace("%", "%25").replace(":", "%3A"))


def local_root(root: str) -> str:
    """The archiver writes with POSIX guarantees (fsync, atomic rename) and so needs a local
    path (or file:// URI). Spark reads the same tree via any Hadoop URI; for an object store,
    point the archiver at a local or mounted directory and sync it out."""
    parsed = urlparse(root)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else root
    raise ValueError(f"DELAYQ_ARCHIVE_DIR={root!r}: the archiver writes to a local directory or file:// URI "
                     f"(it needs fsync and atomic rename); the Spark job can read any Hadoop URI")


@dataclass
class TopicReport:
    archived: int = 0          # events written to files and acknowledged
    files: int = 0
    trimmed: int = 0           # entries the stream dropped before the archiver read them (lost)
    redelivered: int = 0       # entries read again after an earlier run stopped before its XACK


@dataclass
class ArchiveReport:
    topics: dict[str, TopicReport] = field(default_factory=dict)
    skipped: str = ""          # set when another archiver holds the lock

    @property
    def archived(self) -> int:
        return sum(t.archived for t in self.topics.values())

    @property
    def trimmed(self) -> int:
        return sum(t.trimmed for t in self.topics.values())

    def describe(self) -> str:
        if self.skipped:
            return self.skipped
        parts = [f"{name}: {r.archived} events in {r.files} files"
                 + (f", {r.trimmed} trimmed by the stream before archiving (lost)" if r.trimmed else "")
                 for name, r in sorted(self.topics.items()) if r.archived or r.trimmed]
        return "; ".join(parts) or "nothing new to archive"


def event_id(partition: int, entry_id: str, index: int) -> str:
    """The archive's id of one message's event: unique within a topic (see schema.py)."""
    return f"{partition}-{entry_id}-{index}"


def entry_of(eid: str) -> str:
    """The stream entry id ("<ms>-<seq>") inside an archive event id (see ``event_id``)."""
    return eid.split("-", 1)[1].rsplit("-", 1)[0]


def rows_from_entries(entries: list[tuple[bytes, dict]], partition: int = 0) -> dict[str, list]:
    """Stream entries -> column lists in ARROW_SCHEMA order, one row per message of each entry.
    Unknown fields go to ``extra``."""
    cols: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
    for entry_id, fields in entries:
        eid = entry_id.decode()
        for index, row in enumerate(explode(fields, partition)):
            known = {}
            extra = {}
            for key, raw_value in row.items():
                if key == "payload":
                    known["payload"] = raw_value if isinstance(raw_value, bytes) else str(raw_value).encode()
                elif key == "partition":
                    known["partition"] = int(raw_value)
                elif key in INT_FIELDS:
                    value = int(raw_value)
                    # handler_ms -1 means "no claim time known" (a lease expired before this run).
                    known[key] = None if key == "handler_ms" and value < 0 else value
                elif key in STR_FIELDS:
                    known["from_state" if key == "from" else key] = raw_value
                else:
                    extra[key] = raw_value
            known["event_id"] = event_id(partition, eid, index)
            known["extra"] = json.dumps(extra, sort_keys=True) if extra else None
            for name in cols:
                cols[name].append(known.get(name))
    return cols


def _id_tuple(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.decode().partition("-")
    return int(ms), int(seq or 0)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Archive files hold whole messages, evicted payloads unredacted: owner and group only, whatever
# the process's umask (the Spark job reading them may run as another user of the group).
FILE_MODE = 0o640
DIR_MODE = 0o750


def write_file(directory: str, name: str, table: pa.Table) -> str:
    """Write ``table`` as directory/name atomically and durably (mode 0640); returns the final path."""
    if parent := os.path.dirname(directory):     # the date folder: makedirs gives only the leaf the mode
        os.makedirs(parent, mode=DIR_MODE, exist_ok=True)
    os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
    final = os.path.join(directory, name)
    temp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        os.fchmod(fd, FILE_MODE)          # the umask may only narrow the mode at creation
        with open(fd, "wb") as fh:
            pq.write_table(table, fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, final)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    _fsync_dir(directory)
    return final


class Archiver:
    def __init__(self, queue: DelayQueue, root: str, *, batch: int = BATCH, max_wait: float = 0.0):
        """``max_wait`` > 0: leave new events in the stream until a full batch has gathered or
        the oldest is ``max_wait`` seconds old, so a quiet topic makes a file every few minutes,
        not one per run (thousands of tiny files would slow every Spark read)."""
        self.queue = queue
        self.redis = queue.redis
        self.root = local_root(root)
        self.batch = batch
        self.max_wait_ms = int(max_wait * 1000)

    def run_once(self, topics: list[str] | None = None, *, max_batches: int = 100) -> ArchiveReport:
        """Archive what the streams hold now, up to ``max_batches`` batches per topic (so one run
        is bounded; the next run continues). Holds a lock so runs never overlap."""
        lock = archiver_lock_key(self.queue.prefix)
        token = uuid.uuid4().hex
        if not self.redis.set(lock, token, nx=True, px=LOCK_MS):
            return ArchiveReport(skipped="another archiver is running (it holds the lock); skipped this run")
        report = ArchiveReport()
        try:
            for topic in sorted(topics if topics is not None else self.queue.topics()):
                report.topics[topic] = self.archive_topic(topic, max_batches=max_batches)
                self.redis.pexpire(lock, LOCK_MS)
        finally:
            # Release only our own lock (it may have expired and been taken by another run).
            self.redis.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
                            "return 0", 1, lock, token)
        return report

    def _ensure_group(self, stream: str) -> None:
        try:
            # From the start of the stream: the first run archives all history still held.
            self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def archive_topic(self, topic: str, *, max_batches: int = 100) -> TopicReport:
        """Archive every partition's stream of ``topic``; ``max_batches`` bounds each stream."""
        report = TopicReport()
        for p in range(self.queue.layout(topic, fresh=True).partitions):
            self._archive_stream(topic, p, report, max_batches)
        return report

    def _archive_stream(self, topic: str, partition: int, report: TopicReport, max_batches: int) -> None:
        stream = self.queue.keys(topic, partition).events
        self._ensure_group(stream)
        info, group = self._group_info(stream)
        report.trimmed += self._trimmed_unread(info, group, topic)
        # First what an earlier run read and never acknowledged, then new entries (when due).
        # The unacknowledged entries are one batch of a run that stopped before its XACK: read
        # whole, whatever this run's batch size, they make the same files under the same names,
        # which replace that run's files instead of overlapping them.
        unacked = int(group["pending"]) if group else 0
        for start in ("0", ">") if self._due(stream, group) else ("0",):
            count = max(self.batch, unacked) if start == "0" else self.batch
            for _ in range(max_batches):
                got = self.redis.xreadgroup(GROUP, CONSUMER, {stream: start}, count=count)
                entries = got[0][1] if got else []
                if not entries:
                    break
                if start == "0":
                    report.redelivered += len(entries)
                self._archive_batch(topic, partition, stream, entries, report)
                if len(entries) < count:
                    break

    def _group_info(self, stream: str) -> tuple[dict, dict | None]:
        info = self.redis.xinfo_stream(stream)
        group = next((g for g in self.redis.xinfo_groups(stream) if g["name"].decode() == GROUP), None)
        return info, group

    def _due(self, stream: str, group: dict | None) -> bool:
        """Whether new entries should be written now (see ``max_wait``)."""
        if self.max_wait_ms <= 0 or group is None or group.get("lag") is None:
            return True
        if int(group["lag"]) >= self.batch:
            return True
        oldest = self.redis.xrange(stream, min=b"(" + group["last-delivered-id"], count=1)
        return bool(oldest) and self.queue.server_ms() - _id_tuple(oldest[0][0])[0] >= self.max_wait_ms

    def _trimmed_unread(self, info: dict, group: dict | None, topic: str) -> int:
        """Entries the stream trimmed before the group read them. Only counted when the whole
        rest of the stream is unread (its first entry is past the group's position), from the
        stream's lifetime count (Redis >= 7) minus what the group read minus what is left."""
        first = info.get("first-entry")
        if not first or group is None or group.get("entries-read") is None or "entries-added" not in info:
            return 0
        if _id_tuple(first[0]) <= _id_tuple(group["last-delivered-id"]):
            return 0
        lost = int(info["entries-added"]) - int(group["entries-read"]) - int(info["length"])
        if lost > 0:
            log.error("topic %s: %d events were trimmed from the stream before the archiver read them; "
                      "raise events_maxlen or run the archiver more often", topic, lost)
        return max(lost, 0)

    def _archive_batch(self, topic: str, partition: int, stream: str, entries: list, report: TopicReport) -> None:
        present = [(eid, f) for eid, f in entries if f]
        trimmed = len(entries) - len(present)
        if trimmed:
            # Read once, trimmed before it was written: the event is gone. Say so; ack it so the
            # pending list does not grow forever.
            log.error("topic %s: %d events were trimmed from the stream before they were archived; "
                      "raise events_maxlen or run the archiver more often", topic, trimmed)
            report.trimmed += trimmed
        by_date: dict[str, list] = defaultdict(list)
        for entry in present:
            ts = int(entry[1][b"ts"])
            by_date[datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%d")].append(entry)
        for date, group in sorted(by_date.items()):
            columns = rows_from_entries(group, partition)
            table = pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)
            # Named by its first and last entry ids: a crashed batch is re-read as the same entries,
            # so the rewrite replaces the file instead of adding a copy; a re-read that differs
            # overlaps the file's range, and the job de-duplicates those files (files.py).
            name = file_name(partition, group[0][0].decode(), group[-1][0].decode())
            write_file(partition_dir(self.root, date, topic), name, table)
            report.files += 1
            report.archived += table.num_rows
        self._acknowledge(stream, [eid for eid, _ in entries])

    def _acknowledge(self, stream: str, ids: list[bytes]) -> None:
        # One XACK for the whole batch: a crash cannot leave half a batch pending, which would be
        # re-read as a batch starting mid-file and so written twice.
        self.redis.xack(stream, GROUP, *ids)
