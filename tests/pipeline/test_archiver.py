"""The archiver against a real Redis: every stream entry reaches a Parquet file once acknowledged,
and a crash between the file and the XACK loses nothing."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pyarrow.dataset as ds
import pytest

from delayq_analytics.archiver import GROUP, Archiver
from delayq_analytics.files import overlapping
from queue_core.keys import archiver_lock_key
from tests.conftest import ROOT, wait_for


def archived(root):
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    return table.to_pylist()


def stream_ids(dq, topic):
    """The archive id of every message event in the topic's streams: a stream entry holds the
    events of one script call, one per message."""
    out = set()
    for p in range(dq.layout(topic).partitions):
        for eid, fields in dq.redis.xrange(dq.keys(topic, p).events):
            out |= {f"{p}-{eid.decode()}-{i}" for i in range(len(fields[b"ids"].split(b",")))}
    return out


def traffic(dq, topic, n=30):
    """n messages, each published, claimed and acked (the first nacked) by its own call: 3n
    stream entries of one event each."""
    ids = [dq.publish(topic, f"m{i}") for i in range(n)]
    for _ in range(n):
        d = dq.claim(topic, 1)[0]
        if d.id == ids[0]:
            dq.nack(d, RuntimeError("boom"))
        else:
            dq.ack(d)
    return ids


def test_archives_every_event_with_its_fields(dq, tmp_path):
    traffic(dq, "orders")
    dq.publish("emails:eu", b"\xff\x00binary")   # ':' in a topic name survives the partition path
    report = Archiver(dq, str(tmp_path)).run_once()
    rows = archived(tmp_path)
    assert report.archived == len(rows) == len(stream_ids(dq, "orders")) + 1
    by_topic = {}
    for row in rows:
        by_topic.setdefault(row["topic"], []).append(row)
    assert set(by_topic) == {"orders", "emails:eu"}
    assert {r["event_id"] for r in by_topic["orders"]} == stream_ids(dq, "orders")
    events = sorted(r["event"] for r in by_topic["orders"])
    assert events.count("published") == 30 and events.count("acked") == 29 and events.count("nacked") == 1
    nacked = next(r for r in by_topic["orders"] if r["event"] == "nacked")
    assert nacked["next"] == "retrying" and nacked["fp"] and nacked["handler_ms"] >= 0 and nacked["attempt"] == 1
    claimed = next(r for r in by_topic["orders"] if r["event"] == "claimed")
    assert claimed["lateness_ms"] == claimed["ts"] - claimed["due"]
    assert str(rows[0]["date"]).count("-") == 2
    # Nothing pending in the group, and a second run finds nothing new.
    assert dq.redis.xpending(dq.keys("orders").events, GROUP)["pending"] == 0
    assert Archiver(dq, str(tmp_path)).run_once().archived == 0
    traffic(dq, "orders", 5)
    assert Archiver(dq, str(tmp_path)).run_once().topics["orders"].archived == 5 + 5 + 5
    assert {r["event_id"] for r in archived(tmp_path) if r["topic"] == "orders"} == stream_ids(dq, "orders")


def test_evicted_messages_carry_payload_and_metadata(dq, tmp_path):
    dq.configure_topic("orders", dead_max_count=1)
    ids = dq.publish_many("orders", [b"first", b"second"], max_attempts=1)
    for d in dq.claim("orders", 2):
        dq.nack(d, ValueError("bad"))
    Archiver(dq, str(tmp_path)).run_once()
    evicted = [r for r in archived(tmp_path) if r["event"] == "evicted"]
    assert len(evicted) == 1 and evicted[0]["msg"] in ids
    assert evicted[0]["payload"] in (b"first", b"second") and evicted[0]["attempt"] == 1
    meta = json.loads(evicted[0]["meta"])   # enough to restore it: header fields and the delivery record
    assert meta["max"] == 1 and json.loads(meta["info"])["err"]["t"] == "ValueError"
    assert evicted[0]["reason"] == "max_count"


def test_finding_archive_files_readable_by_everyone(dq, tmp_path):
    """Archive files hold evicted payloads unredacted: 0640 files in 0750 folders, even under umask 0."""
    dq.configure_topic("orders", dead_max_count=1)
    dq.publish_many("orders", [b"card 4111", b"second"], max_attempts=1)
    for d in dq.claim("orders", 2):
        dq.nack(d, ValueError("bad"))
    old = os.umask(0)
    try:
        Archiver(dq, str(tmp_path / "archive")).run_once()
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "archive").rglob("*") if p.is_file()]
    folders = [p for p in (tmp_path / "archive").rglob("*") if p.is_dir()]
    assert files and folders
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {"0o640"}
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {"0o750"}


def test_one_run_at_a_time(dq, tmp_path):
    dq.redis.set(archiver_lock_key(), "someone-else")
    traffic(dq, "orders", 3)
    report = Archiver(dq, str(tmp_path)).run_once()
    assert report.skipped and report.archived == 0
    assert dq.redis.get(archiver_lock_key()) == b"someone-else"   # not ours to release


def test_batched_entries_become_one_row_per_message(dq, tmp_path):
    """publish_many, a batch claim and ack_many write one stream entry each, for 40 messages."""
    ids = dq.publish_many("orders", [f"m{i}" for i in range(40)])
    deliveries = dq.claim("orders", 40)
    dq.ack_many(deliveries)
    assert dq.redis.xlen(dq.keys("orders").events) == 3
    Archiver(dq, str(tmp_path)).run_once()
    rows = archived(tmp_path)
    assert len(rows) == 120 and len({r["event_id"] for r in rows}) == 120
    for kind in ("published", "claimed", "acked"):
        assert sorted(r["msg"] for r in rows if r["event"] == kind) == sorted(ids)
    claimed = [r for r in rows if r["event"] == "claimed"]
    assert all(r["lateness_ms"] == r["ts"] - r["due"] and r["attempt"] == 1 and r["group"] == "default"
               for r in claimed)
    assert {r["group"] for r in rows if r["event"] == "published"} == {None}
    assert {r["partition"] for r in rows} == {0}


def test_trimmed_entries_are_reported_not_hidden(dq, tmp_path):
    traffic(dq, "orders", 10)
    archiver = Archiver(dq, str(tmp_path), batch=5)
    stream = dq.keys("orders").events
    archiver._ensure_group(stream)
    dq.redis.xreadgroup(GROUP, "archiver", {stream: ">"}, count=5)   # read, then trimmed away
    dq.redis.xtrim(stream, maxlen=20, approximate=False)   # 5 read + 5 unread entries go
    report = archiver.run_once()
    assert report.topics["orders"].trimmed == 10
    assert report.topics["orders"].archived == len(stream_ids(dq, "orders")) == 20
    assert "trimmed" in report.describe()


CRASHING_RUN = textwrap.dedent("""
    import os, signal, sys
    from delayq_analytics.archiver import Archiver
    from queue_core import DelayQueue

    def crash(self, stream, ids):
        os.kill(os.getpid(), signal.SIGKILL)   # after the file is renamed, before XACK

    Archiver._acknowledge = crash
    Archiver(DelayQueue.from_url(sys.argv[1]), sys.argv[2], batch=int(sys.argv[3])).run_once()
""")


@pytest.mark.parametrize("rerun_batch", [40, 25])
def test_crash_between_file_and_ack_loses_nothing(dq, redis_url, tmp_path, rerun_batch):
    traffic(dq, "orders", 20)
    expected = stream_ids(dq, "orders")
    proc = subprocess.run([sys.executable, "-c", CRASHING_RUN, redis_url, str(tmp_path), "40"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    written = archived(tmp_path)
    assert 0 < len(written) < len(expected)            # the first batch's file is there, unacked
    crashed_files = {p.name for p in tmp_path.rglob("*.parquet")}
    dq.redis.delete(archiver_lock_key())                # the dead run's lock (or wait LOCK_MS)
    report = Archiver(dq, str(tmp_path), batch=rerun_batch).run_once()
    assert report.topics["orders"].redelivered == 40
    rows = archived(tmp_path)
    ids = [r["event_id"] for r in rows]
    assert set(ids) == expected                         # nothing lost
    # The re-read takes the whole unacknowledged batch, whatever this run's batch size, so its file
    # has the same name (first and last entry) and replaces the crashed run's: no copy, and no
    # files with overlapping ranges for the job to de-duplicate (tests/pipeline/test_end_to_end.py
    # archives batches twice on purpose).
    assert len(ids) == len(expected)
    names = {p.name for p in tmp_path.rglob("*.parquet")}
    assert crashed_files <= names and not overlapping(str(p) for p in tmp_path.rglob("*.parquet"))
    assert dq.redis.xpending(dq.keys("orders").events, GROUP)["pending"] == 0


@pytest.mark.django_db
def test_restore_evicted_messages(dq, redis_url, settings, tmp_path):
    from io import StringIO

    from django.core.management import CommandError, call_command

    from dashboard.models import AuditEntry

    settings.DELAYQ_REDIS_URL = redis_url
    settings.DELAYQ_ARCHIVE_DIR = str(tmp_path)
    dq.configure_topic("orders", dead_max_count=1)
    ids = dq.publish_many("orders", [b"first", b"second", b"third"], max_attempts=1, headers={"tenant": "a"})
    for d in dq.claim("orders", 3):
        dq.nack(d, ValueError("bad"))
    call_command("dq_archive", "--once", stdout=StringIO())
    evicted = [r["msg"] for r in archived(tmp_path) if r["event"] == "evicted"]
    assert len(evicted) == 2
    listing = StringIO()
    call_command("dq_restore", "orders", stdout=listing)
    assert "2 message(s) match" in listing.getvalue() and dq.counts("orders")["ready"] == 0
    call_command("dq_restore", "orders", "--id", evicted[0], "--yes", stdout=StringIO())
    (restored,) = dq.peek("orders", "ready", limit=10)
    payloads = {i: p for i, p in zip(ids, [b"first", b"second", b"third"], strict=True)}
    assert restored.payload == payloads[evicted[0]] and restored.headers == {"tenant": "a"}
    # A second restore while the copy is queued returns that copy (dedup key), never a duplicate.
    call_command("dq_restore", "orders", "--id", evicted[0], "--yes", stdout=StringIO())
    assert dq.counts("orders")["ready"] == 1
    assert AuditEntry.objects.filter(action="message.restore", topic="orders").count() == 2
    with pytest.raises(CommandError, match="no evicted messages"):
        call_command("dq_restore", "orders", "--id", "nope", stdout=StringIO(), stderr=StringIO())


def test_quiet_topics_wait_for_a_fuller_file(dq, tmp_path):
    traffic(dq, "orders", 5)                              # 15 events, far from a batch
    waiting = Archiver(dq, str(tmp_path), batch=100, max_wait=300)
    assert waiting.run_once().archived == 0               # left in the stream, not read
    assert dq.redis.xpending(dq.keys("orders").events, GROUP)["pending"] == 0
    traffic(dq, "orders", 30)                             # 15 + 90 events: a full batch
    assert waiting.run_once().archived == 105
    traffic(dq, "orders", 1)
    aging = Archiver(dq, str(tmp_path), batch=100, max_wait=0.2)
    published = dq.server_ms()
    if dq.server_ms() - published < 200:
        assert aging.run_once().archived == 0             # 3 events, younger than max_wait
    wait_for(lambda: dq.server_ms() - published > 250, 5, "the oldest event older than max_wait")
    assert aging.run_once().archived == 3


@pytest.mark.django_db
def test_finding_a_restore_whose_key_window_is_open_restores_the_message(dq, redis_url, settings, tmp_path):
    """A review found restoring an evicted message published with dedup='unique_for' met its own
    key's window (opened at the eviction) and 'restored' nothing: the publish answered duplicate
    with the evicted id. It is restored under a key of its own."""
    from io import StringIO

    from django.core.management import call_command

    settings.DELAYQ_REDIS_URL = redis_url
    settings.DELAYQ_ARCHIVE_DIR = str(tmp_path)
    dq.configure_topic("orders", dead_max_count=1)
    kept = dq.publish("orders", b"A", key="K", dedup="unique_for", window=3600, max_attempts=1)
    dq.nack(dq.claim("orders", 1)[0], ValueError("bad"))
    dq.publish("orders", b"B", max_attempts=1)
    dq.nack(dq.claim("orders", 1)[0], ValueError("bad"))      # evicts A: its window opens
    call_command("dq_archive", "--once", stdout=StringIO())
    assert [r["msg"] for r in archived(tmp_path) if r["event"] == "evicted"] == [kept]
    call_command("dq_restore", "orders", "--id", kept, "--yes", stdout=StringIO())
    restored = [m for m in dq.peek("orders", "ready", limit=10)]
    assert [m.payload for m in restored] == [b"A"] and restored[0].id != kept


@pytest.mark.django_db
def test_finding_restoring_an_evicted_batch_callback_takes_a_key_of_its_own(dq, redis_url, settings):
    """A review found that restoring an evicted batch callback crashed dq_restore: its archived key
    is the internal NUL-prefixed one (engine/batch.py), which publish refuses from a user."""
    import json

    from dashboard.services import archive

    settings.DELAYQ_REDIS_URL = redis_url
    dq.configure_topic("reports")
    row = {"msg": "01JZZZZZZZZZZZZZZZZZZZZZZZ", "payload": b'{"batch": "done"}',
           "meta": json.dumps({"key": "\0batch:b1:default:complete"})}
    [(old, new)] = archive.restore("reports", [row])
    restored = dq.get("reports", new)
    assert old == row["msg"] and restored.key == f"restore:{row['msg']}" and restored.payload == row["payload"]
