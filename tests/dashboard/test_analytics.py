"""The Analytics page: charts and tables from the loaded tables, permissions, the run button
through a real Celery worker running the real Spark job."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from dashboard import analytics
from dashboard.charts import nice_max
from dashboard.models import (
    AnalyticsRun,
    AttemptStat,
    AuditEntry,
    ErrorGroupStat,
    LateCauseStat,
    MinuteStat,
    TimingStat,
)
from delayq_analytics.archiver import Archiver
from tests.conftest import start_worker, wait_for

T = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def load_sample():
    for i in range(30):
        MinuteStat.objects.create(topic="orders", minute=T + timedelta(minutes=i), published=100 + i, delivered=90,
                                  acked=80, nacked=10, retried=8, dead_lettered=2)
        MinuteStat.objects.create(topic="emails", minute=T + timedelta(minutes=i), published=5, acked=5)
        TimingStat.objects.create(topic="orders", minute=T + timedelta(minutes=i), measure="lateness", count=90,
                                  p50=2, p95=7, p99=9, max=31 + i)
    AttemptStat.objects.create(topic="orders", attempts=1, messages=75)
    AttemptStat.objects.create(topic="orders", attempts=2, messages=25)
    ErrorGroupStat.objects.create(topic="orders", fingerprint="abc123", dead=60, first_seen=T, last_seen=T,
                                  sample_ids=["01ID<script>"], replayed=30, replay_succeeded=15)


def test_charts_and_numbers(viewer, site_queue):
    load_sample()
    page = viewer.get(reverse("delayq:topic_analytics", args=["orders"]) + "?range=1h")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("<svg") == 4 and "<polyline" in html and "<rect" in html
    assert "Handler time: no data in this range." in html          # no handler figures loaded
    assert "Delivery lateness" in html and "Retry and dead-letter rates" in html
    assert "<td>129</td>" in html                     # the last minute's published, in the numbers table
    assert "<td>60</td>" in html                      # max lateness of that minute
    assert "25.0 % of acked messages needed a retry" in html
    # retry rate = 8 / (80 + 10) = 8.89 %; dead-letter rate = 2 / 82 = 2.44 %
    assert "<td>8.89</td>" in html and "<td>2.44</td>" in html
    dead_tab = reverse("delayq:topic_state", args=["orders", "default", "dead"]) + "?fp=abc123"
    assert dead_tab in html and "15 (50 %)" in html
    assert "01ID<script>" not in html                 # escaped, never raw
    everything = viewer.get(reverse("delayq:analytics") + "?range=1h").content.decode()
    assert "<td>134</td>" in everything               # 129 + 5 across topics


def test_a_group_selector_shows_one_consumer_groups_figures(viewer, site_queue):
    load_sample()                       # the topics' totals (group *)
    for i in range(30):
        minute = T + timedelta(minutes=i)
        MinuteStat.objects.create(topic="orders", group="billing", minute=minute, delivered=40, acked=30, nacked=7,
                                  retried=7)
        MinuteStat.objects.create(topic="orders", group="default", minute=minute, delivered=50, acked=50, nacked=3,
                                  retried=1, dead_lettered=2)
    ErrorGroupStat.objects.create(topic="orders", group="billing", fingerprint="card99", dead=4, first_seen=T,
                                  last_seen=T, sample_ids=["01BILL"], replayed=0, replay_succeeded=0)
    url = reverse("delayq:topic_analytics", args=["orders"])
    whole = viewer.get(url + "?range=1h").content.decode()
    assert 'data-group="billing"' in whole and 'data-group="default"' in whole
    assert "<td>129</td>" in whole and "card99" not in whole       # all groups: the topic's totals
    billing = viewer.get(url + "?range=1h&group=billing").content.decode()
    assert 'data-testid="analytics-group">billing<' in billing
    # retry rate of billing = 7 / (30 + 7) = 18.92 %
    assert "<td>18.92</td>" in billing and "<td>129</td>" not in billing
    assert "card99" in billing and "abc123" not in billing
    assert reverse("delayq:topic_state", args=["orders", "billing", "dead"]) + "?fp=card99" in billing
    assert "/topics/orders/billing/messages/01BILL/" in billing
    # An unknown group falls back to the topic's totals; the all-topics page never splits by group.
    assert "<td>129</td>" in viewer.get(url + "?range=1h&group=nope").content.decode()
    assert "<td>134</td>" in viewer.get(reverse("delayq:analytics") + "?range=1h").content.decode()


def test_buckets_for_long_ranges(viewer, site_queue):
    load_sample()
    html = viewer.get(reverse("delayq:topic_analytics", args=["orders"]) + "?range=30d").content.decode()
    assert "per 360 min" in html
    assert f"<td>{sum(100 + i for i in range(30))}</td>" in html     # the 30 minutes summed in one bucket


def test_empty_and_permissions(client, nobody, viewer, operator, site_queue, monkeypatch):
    assert "No analysed events" in viewer.get(reverse("delayq:analytics")).content.decode()
    assert client.get(reverse("delayq:analytics")).status_code == 302              # login first
    assert nobody.get(reverse("delayq:analytics")).status_code == 403
    assert viewer.post(reverse("delayq:analytics_run")).status_code == 403         # Viewer cannot start runs
    assert "Run analytics now" not in viewer.get(reverse("delayq:analytics")).content.decode()
    assert operator.get(reverse("delayq:analytics_run")).status_code == 405
    queued = []
    monkeypatch.setattr("dashboard.tasks.run_analytics.apply_async", lambda args, **kw: queued.append(*args))
    assert operator.post(reverse("delayq:analytics_run")).status_code == 302
    again = operator.post(reverse("delayq:analytics_run"), follow=True)           # a double click
    assert "already pending" in again.content.decode()
    assert len(queued) == 1 and AnalyticsRun.objects.count() == 1
    page = viewer.get(reverse("delayq:analytics")).content.decode()
    run = AnalyticsRun.objects.get()
    # live.js refreshes the panel on the operator's interval; the panel names the run it watches
    live = re.search(r'<section id="analytics-run"[^>]* data-live="([^"]*)"', page).group(1).replace("&amp;", "&")
    assert live == reverse("delayq:analytics") + f"?range=covered&watching={run.pk}"
    poll = viewer.get(live, headers={"HX-Request": "true"})
    assert 'data-status="pending"' in poll.content.decode() and "<svg" not in poll.content.decode()
    assert "HX-Refresh" not in poll                       # still running: keep refreshing the panel
    AnalyticsRun.objects.update(status="done", active=False)
    assert viewer.get(live, headers={"HX-Request": "true"})["HX-Refresh"] == "true"   # finished: reload for the charts
    # a panel that watched no run (nothing was running when the page loaded) just refreshes
    idle = viewer.get(reverse("delayq:analytics") + "?range=covered", headers={"HX-Request": "true"})
    assert "HX-Refresh" not in idle and 'data-status="done"' in idle.content.decode()
    assert AuditEntry.objects.filter(action="analytics.run", username="operator").count() == 1


def test_nice_max():
    assert [nice_max(v) for v in (0, 0.3, 1, 7, 12, 99, 101, 4500)] == [1, 0.5, 1, 10, 20, 100, 200, 5000]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_run_button_through_celery_and_spark(operator, site_queue, celery_env, settings, tmp_path):
    archive, out = tmp_path / "archive", tmp_path / "analytics"
    settings.DELAYQ_ARCHIVE_DIR, settings.DELAYQ_ANALYTICS_DIR = str(archive), str(out)
    celery_env = {**celery_env, "DELAYQ_ARCHIVE_DIR": str(archive), "DELAYQ_ANALYTICS_DIR": str(out)}
    ids = site_queue.publish_many("orders", [f"m{i}" for i in range(20)])
    for d in site_queue.claim("orders", 20):
        site_queue.ack(d)
    Archiver(site_queue, str(archive)).run_once()
    proc = start_worker(celery_env)
    try:
        operator.post(reverse("delayq:analytics_run"))
        run = AnalyticsRun.objects.get()
        stages = set()

        def finished():
            run.refresh_from_db()
            stages.add(run.stage)
            return not run.active
        wait_for(finished, 180, "analytics run finished")
    finally:
        proc.terminate()
        proc.wait(30)
    assert run.status == "done", run.error
    assert run.events == 60 and run.duration.total_seconds() > 0
    assert run.late_causes and not LateCauseStat.objects.exists()     # the output was there; nothing was late
    assert len(stages) > 1                                                   # progress was visible on the way
    assert sum(MinuteStat.objects.filter(topic="orders").values_list("published", flat=True)) == len(ids)
    html = operator.get(reverse("delayq:topic_analytics", args=["orders"])).content.decode()
    assert "<polyline" in html or "<circle" in html


def test_finding_analytics_default_range_covers_its_data(viewer, site_queue):
    """Without ?range= the page opens on the minutes its data covers, padded: a fresh half hour of
    figures is 40 one-minute points (30 + 5 either side), not one spike at the end of 24 h."""
    load_sample()   # 12:00-12:29
    html = viewer.get(reverse("delayq:topic_analytics", args=["orders"])).content.decode()
    events = html[html.index('aria-label="Events per minute"'):]
    points = re.findall(r'<polyline class="s1" points="([^"]*)"', events)[0].split()
    assert len(points) == 40
    assert '<a href="?range=covered" aria-current="page">covered</a>' in html
    assert "<td>129</td>" in html and "<td>100</td>" in html      # the first and the last minute, each alone
    day = viewer.get(reverse("delayq:topic_analytics", args=["orders"]) + "?range=24h").content.decode()
    assert "Events per 15 min" in day                                  # a chosen range is kept
    # without data the default is the last 24 h, and says so
    assert "No analysed events for nobody-here in this range" in viewer.get(
        reverse("delayq:topic_analytics", args=["nobody-here"])).content.decode()


def write_late_causes(out, rows):
    """The job's late_causes output as delayq_analytics.run writes it: Parquet, partitioned by date
    (hive folders date=YYYY-MM-DD), the columns of transforms.late_causes."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    table = pa.table({"topic": [r[0] for r in rows], "group": [r[1] for r in rows],
                      "minute": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
                      "cause": [r[3] for r in rows], "deliveries": pa.array([r[4] for r in rows], pa.int64()),
                      "max_ms": pa.array([r[5] for r in rows], pa.int64()),
                      "date": [r[2].date().isoformat() for r in rows]})
    ds.write_dataset(table, str(out / "late_causes"), format="parquet", partitioning=["date"],
                     partitioning_flavor="hive")


def window(day: datetime) -> dict:
    return {"since_ms": int(day.timestamp() * 1000), "until_ms": int((day + timedelta(days=1)).timestamp() * 1000)}


def test_late_causes_load_and_stack_by_cause_with_totals_in_words(viewer, site_queue, tmp_path):
    day = T.replace(hour=0)
    write_late_causes(tmp_path, [
        ("orders", "default", T + timedelta(minutes=3), "key_held", 4, 900),
        ("orders", "default", T + timedelta(minutes=3), "no_worker", 2, 40),
        ("orders", "billing", T + timedelta(minutes=5), "rate_limited", 1, 70),
        ("orders", "*", T + timedelta(minutes=3), "key_held", 4, 900),
        ("orders", "*", T + timedelta(minutes=3), "no_worker", 2, 40),
        ("orders", "*", T + timedelta(minutes=5), "rate_limited", 1, 70),
        ("emails", "*", T + timedelta(minutes=7), "paused", 9, 5_000),
        ("orders", "*", T - timedelta(days=1), "paused", 50, 1),      # outside the run's window: not loaded
    ])
    assert analytics.load_outputs(str(tmp_path), window(day))["late_causes"] == 8      # rows read
    assert LateCauseStat.objects.count() == 7
    # loading the same window again replaces its rows, never doubles them
    analytics.load_outputs(str(tmp_path), window(day))
    assert sum(LateCauseStat.objects.filter(group="*").values_list("deliveries", flat=True)) == 16
    load_sample()          # after the loads: they replace the window's minute counts (none written here)
    AnalyticsRun.objects.create(status="done", active=False, late_causes=True)
    url = reverse("delayq:topic_analytics", args=["orders"])
    html = viewer.get(url + "?range=1h").content.decode()
    section = html[html.index('data-testid="late-causes-section"'):]
    assert re.search(r'data-testid="late-cause-totals">4 key held, 2 no worker, 1 rate limited \(', section)
    chart = section[section.index('data-testid="lateness-causes"'):section.index("</figure>")]
    assert "Late deliveries per minute by cause (over 10 ms past due" in chart
    assert chart.count('data-series="key held"') == 1 and chart.count('data-series="rate limited"') == 1
    assert 'data-series="paused"' not in chart and "paused 0" in chart    # every cause in the legend, same order
    MinuteStat.objects.create(topic="orders", group="billing", minute=T + timedelta(minutes=29), delivered=1)
    billing = viewer.get(url + "?range=1h&group=billing").content.decode()
    assert 'data-testid="late-cause-totals">1 rate limited (' in billing
    everything = viewer.get(reverse("delayq:analytics") + "?range=1h").content.decode()
    assert 'data-testid="late-cause-totals">9 paused, 4 key held, 2 no worker, 1 rate limited (' in everything
    LateCauseStat.objects.filter(topic="emails").delete()
    assert "No late deliveries (over 10 ms) of emails in this range." in viewer.get(
        reverse("delayq:topic_analytics", args=["emails"]) + "?range=1h").content.decode()


def test_a_run_from_before_late_causes_loads_no_rows_and_the_page_says_so(viewer, site_queue, tmp_path):
    LateCauseStat.objects.create(topic="orders", minute=T, cause="paused", deliveries=3)
    (tmp_path / "minute_counts").mkdir()        # an older job's output folder: no late_causes beside it
    assert analytics.load_outputs(str(tmp_path), window(T.replace(hour=0)))["late_causes"] is None
    assert not LateCauseStat.objects.exists()   # the window's rows are replaced by none, without an error
    load_sample()
    AnalyticsRun.objects.create(status="done", active=False, late_causes=False)
    html = viewer.get(reverse("delayq:topic_analytics", args=["orders"]) + "?range=1h").content.decode()
    assert "made by a job from before lateness causes" in html and "No late deliveries" not in html
