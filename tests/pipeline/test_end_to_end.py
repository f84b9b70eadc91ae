"""Real traffic -> archive -> Spark job -> Django tables, checked against the truth computed in
plain Python from the same events (read straight from the Redis streams)."""

import math
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dashboard import analytics
from dashboard.models import AnalyticsRun, AttemptStat, ErrorGroupStat, MinuteStat, TimingStat
from delayq_analytics.archiver import Archiver, entry_of, write_file
from delayq_analytics.counts import COUNT_COLUMNS
from delayq_analytics.files import file_name, overlapping
from queue_core import RetryPolicy
from queue_core.events import explode

pytestmark = [pytest.mark.slow]
DB = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def drive_traffic(dq):
    """Two consumer groups on orders, each with its own failures: publish, fail some (retry),
    dead-letter some, replay half of the dead, ack the rest."""
    dq.configure_topic("orders", retry=RetryPolicy(kind="fixed", base=0.01, max_attempts=3))
    dq.configure_group("orders", "audit", retry=RetryPolicy(kind="fixed", base=0.01, max_attempts=2))
    ids = dq.publish_many("orders", [f"order-{i}" for i in range(300)])
    ids += dq.publish_many("orders", [f"late-{i}" for i in range(50)], delay=0.2)
    poison = {"default": set(ids[::10]), "audit": set(ids[3::25])}   # always fail: dead
    flaky = {"default": set(ids[1::7]), "audit": set(ids[2::9])}      # fail the first attempt only
    dq.publish_many("emails:eu", [f"mail-{i}" for i in range(40)])

    def consume(topic, group="default"):
        deadline = time.monotonic() + 30
        bad, shaky = poison.get(group, set()), flaky.get(group, set())
        while time.monotonic() < deadline:
            batch = dq.claim(topic, 50, group=group)
            for d in batch:
                if d.id in bad or (d.id in shaky and d.attempt == 1):
                    dq.nack(d, ValueError(f"bad order {'poison' if d.id in bad else 'flaky'} in {group}"))
                else:
                    dq.ack(d)
            counts = dq.counts(topic, group=group)
            if not batch and all(counts[s] == 0 for s in ("pending", "ready", "retrying", "unacked")):
                return
            if not batch:
                time.sleep(0.01)
        raise AssertionError(f"{topic}/{group} did not drain")

    for group in ("default", "audit"):
        consume("orders", group)
    consume("emails:eu")
    for group in ("default", "audit"):
        dead = sorted(poison[group])
        assert dq.counts("orders", group=group)["dead"] == len(dead)
        replayed = dead[: len(dead) // 2]
        assert dq.replay("orders", replayed, group=group) == len(replayed)
        poison[group].difference_update(replayed[::2])   # half of the replayed now succeed
        consume("orders", group)


def stream_events(dq, topic):
    """One dict per message event, read straight from the topic's streams (an entry batches the
    events of one script call)."""
    out = []
    for p in range(dq.layout(topic).partitions):
        for eid, fields in dq.redis.xrange(dq.keys(topic, p).events):
            for i, row in enumerate(explode(fields, p)):
                out.append({"event_id": f"{p}-{eid.decode()}-{i}", "topic": topic,
                            **{k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in row.items()}})
    return out


def nearest_rank(values, q):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def truth(events):
    """The figures, computed independently of Spark from the raw stream entries: per (topic,
    consumer group) and for the topic over its groups (group ``*``, where published counts), and
    for timings and attempts across topics (``*``, ``*``)."""
    minute = defaultdict(Counter)
    timings = defaultdict(list)
    attempts = Counter()
    for e in events:
        ts = int(e["ts"])
        m = ts - ts % 60_000
        group = "*" if e["event"] == "published" else (e.get("group") or "default")
        owners = [(e["topic"], "*")] + ([(e["topic"], group)] if group != "*" else [])
        everywhere = owners + [("*", "*")]
        kind, att = e["event"], int(e.get("attempt", 0))
        names = {"published": "published", "acked": "acked", "nacked": "nacked", "rejected": "rejected",
                 "expired": "expired", "dead": "dead_lettered", "replayed": "replayed", "evicted": "evicted",
                 "cancelled": "cancelled", "deleted": "deleted"}
        for owner in owners:
            key = (*owner, m)
            if kind in names:
                minute[key][names[kind]] += 1
            if kind == "claimed":
                minute[key]["delivered" if att == 1 else "redelivered"] += 1
            if kind in ("nacked", "expired") and e.get("next") == "retrying":
                minute[key]["retried"] += 1
        for owner in everywhere:
            if kind == "claimed" and att == 1:
                timings[(*owner, m, "lateness")].append(int(e["lateness_ms"]))
            if kind in ("acked", "nacked", "rejected") and int(e.get("handler_ms", -1)) >= 0:
                timings[(*owner, m, "handler")].append(int(e["handler_ms"]))
            if kind == "acked":
                attempts[(*owner, att)] += 1
    groups = defaultdict(lambda: {"dead": 0, "replayed": 0, "ok": 0, "samples": []})
    by_msg = defaultdict(list)
    for e in events:
        if e["event"] != "published":
            by_msg[(e["topic"], e.get("group") or "default", e["msg"])].append(e)
    for (topic, group, msg), evs in by_msg.items():
        evs.sort(key=lambda e: (int(e["ts"]), e["event_id"]))
        for i, e in enumerate(evs):
            if e["event"] != "dead":
                continue
            for g in (groups[(topic, group, e["fp"])], groups[(topic, "*", e["fp"])]):
                _count_death(g, e, msg, evs[i + 1:])
    return minute, timings, attempts, groups


def _count_death(g, e, msg, later):
    """One death of ``msg`` (event ``e``), with the events of the message in its group after it."""
    g["dead"] += 1
    g["samples"].append((int(e["ts"]), msg))
    replay = next((x for x in later if x["event"] == "replayed"), None)
    if replay:
        g["replayed"] += 1
        end = next((x for x in later if int(x["ts"]) > int(replay["ts"]) and x["event"] in ("acked", "dead")), None)
        g["ok"] += bool(end and end["event"] == "acked")


@DB
def test_job_figures_match_the_truth(dq, redis_url, settings, tmp_path):
    settings.DELAYQ_REDIS_URL = redis_url
    settings.DELAYQ_ARCHIVE_DIR = str(tmp_path / "archive")
    settings.DELAYQ_ANALYTICS_DIR = str(tmp_path / "analytics")
    drive_traffic(dq)
    report = Archiver(dq, settings.DELAYQ_ARCHIVE_DIR).run_once()
    events = stream_events(dq, "orders") + stream_events(dq, "emails:eu")
    assert report.archived == len(events) > 1000
    # Events archived twice must count once. A copy made by hand (a name without an entry range):
    # every file in its folder is de-duplicated.
    archive = Path(settings.DELAYQ_ARCHIVE_DIR)
    first = next(archive.rglob("topic=orders/part-*.parquet"))
    shutil.copy(first, first.with_name("part-copy-of-a-batch.parquet"))
    # The first entries of a batch written again under their own range (a re-read that differed):
    # in a folder whose name Spark lists escaped twice (':' is %3A on disk).
    mails = next(archive.rglob("topic=emails%3Aeu/part-*.parquet"))
    table = pq.read_table(mails)
    again = table.slice(0, table.num_rows // 2)
    ids = again["event_id"].to_pylist()
    write_file(str(mails.parent), file_name(0, entry_of(ids[0]), entry_of(ids[-1])), again)
    assert overlapping(str(p) for p in archive.rglob("*.parquet")) >= {str(mails), str(first)}

    run = analytics.execute(analytics.create_run(trigger="test").pk)
    assert run.status == AnalyticsRun.Status.DONE, run.error
    assert run.events == len(events) and run.progress == 100
    assert run.duplicates == pq.read_metadata(first).num_rows + again.num_rows

    minute, timings, attempts, groups = truth(events)
    loaded = {(m.topic, m.group, int(m.minute.timestamp() * 1000)): {c: getattr(m, c) for c in COUNT_COLUMNS}
              for m in MinuteStat.objects.all()}
    assert loaded == {k: {c: v.get(c, 0) for c in COUNT_COLUMNS} for k, v in minute.items()}
    loaded_timings = {(t.topic, t.group, int(t.minute.timestamp() * 1000), t.measure):
                      (t.count, t.p50, t.p95, t.p99, t.max) for t in TimingStat.objects.all()}
    assert loaded_timings == {k: (len(v), nearest_rank(v, .5), nearest_rank(v, .95), nearest_rank(v, .99), max(v))
                              for k, v in timings.items()}
    assert {(a.topic, a.group, a.attempts): a.messages for a in AttemptStat.objects.all()} == dict(attempts)
    assert attempts[("orders", "default", 2)] > 0 and attempts[("orders", "audit", 2)] > 0
    assert {m.group for m in MinuteStat.objects.filter(topic="orders")} == {"default", "audit", "*"}
    loaded_groups = {(g.topic, g.group, g.fingerprint): (g.dead, g.replayed, g.replay_succeeded, g.sample_ids,
                                                         int(g.first_seen.timestamp() * 1000))
                     for g in ErrorGroupStat.objects.all()}
    assert loaded_groups == {k: (g["dead"], g["replayed"], g["ok"], [m for _, m in sorted(g["samples"])[:5]],
                                 min(ts for ts, _ in g["samples"])) for k, g in groups.items()}
    poison = next(g for g in ErrorGroupStat.objects.filter(group="default") if g.dead > 20)
    assert 0 < poison.replayed_share < 1 and 0 < poison.replay_success_share < 1
    assert ErrorGroupStat.objects.filter(group="audit", dead__gt=0).exists()

    # A re-run over the same window replaces, never adds; a run started by hand ("Run analytics
    # now") first archives what the streams hold, so 25 messages published just before count.
    settings.DELAYQ_ARCHIVE_MAX_WAIT = 3600         # the beat archiver would hold these back
    dq.publish_many("emails:eu", [f"late-mail-{i}" for i in range(25)])
    again = analytics.execute(analytics.create_run(trigger="manual").pk)
    assert again.status == AnalyticsRun.Status.DONE, again.error
    assert sum(m.published for m in MinuteStat.objects.all()) == 390 + 25
    assert again.events == run.events + 25


@DB
def test_java_missing_is_said_plainly(settings, tmp_path, monkeypatch):
    settings.DELAYQ_ARCHIVE_DIR = str(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    run = analytics.execute(analytics.create_run(trigger="test").pk)
    assert run.status == AnalyticsRun.Status.FAILED and not run.active
    assert "needs Java" in run.error and "apt-get install openjdk-17-jre-headless" in run.error


@DB
def test_one_run_at_a_time():
    analytics.create_run(trigger="test")
    with pytest.raises(analytics.RunRefused, match="already pending"):
        analytics.create_run(trigger="test")


def run_cli(*args, env=None):
    import subprocess
    import sys

    from tests.conftest import ROOT
    return subprocess.run([sys.executable, "-m", "delayq_analytics.run", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_refuses_bad_input_before_starting_spark(tmp_path):
    missing = run_cli("--archive", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert missing.returncode == 2 and "no archive at" in missing.stderr and "dq_archive" in missing.stderr
    bad_time = run_cli("--archive", str(tmp_path), "--out", str(tmp_path), "--since", "yesterday")
    assert bad_time.returncode == 2 and "not an ISO 8601 date" in bad_time.stderr
    backwards = run_cli("--archive", str(tmp_path), "--out", str(tmp_path), "--since", "2026-11-02",
                        "--until", "2026-11-01")
    assert backwards.returncode == 2 and "--since must be before --until" in backwards.stderr
