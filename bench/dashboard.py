"""Dashboard benchmark: python -m bench.dashboard [--quick] [--write]

With 1,000,000 dead letters in one topic (100,000 with --quick): server time of the overview and
of the first and a deep page of the dead tab (Django test client, in-process: view + template +
Redis), then a bulk replay of all of them through the replay operation's task code, with every
Redis call over 10 ms caught by SLOWLOG. Finally the overview with 1,000 more topics of 3 consumer
groups each: its first page (collapsed, and with every topic expanded to its groups), a search,
one group's topic page, and a Prometheus scrape of all of them.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench.engine import machine, write_section

TARGET_MS = 150
METRICS_TARGET_MS = 50
TOPICS = 1_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    n = 100_000 if args.quick else 1_000_000
    tmp = tempfile.mkdtemp(prefix="delayq-bench-dash-")
    from queue_core import DelayQueue, MessageState
    from queue_core.contrib import localserver
    from queue_core.engine.read import position_cursor
    from queue_core.queue import Failure

    server = localserver.start(data_dir=tmp)
    os.environ.update(DJANGO_SETTINGS_MODULE="config.settings_test", DATABASE_URL=f"sqlite:///{tmp}/db.sqlite3",
                      DELAYQ_REDIS_URL=server.url, REDIS_URL=server.url)
    rows = []

    def row(name, value, note=""):
        rows.append((name, value, note))
        print(f"  {name:<48} {value:>14}  {note}", flush=True)

    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import Client
        from django.test.utils import setup_test_environment

        from dashboard.models import BulkOperation
        from dashboard.tasks import run_bulk_operation

        setup_test_environment()
        call_command("migrate", verbosity=0)
        from django.contrib.auth.models import User

        admin = User.objects.create_superuser("bench", password="x")
        client = Client()
        client.force_login(admin)

        q = DelayQueue.from_url(server.url, actor="bench")
        q.configure_topic("dlq", dead_max_count=n, events=False)
        t = time.perf_counter()
        for i in range(n // 1000):
            q.publish_many("dlq", [b'{"order": 1, "note": "bench"}'] * 1000, max_attempts=1)
            error = TimeoutError("upstream timed out") if i % 2 else ValueError("bad sku")
            q.nack_many([Failure(d, error) for d in q.claim("dlq", 1000)])
        assert q.counts("dlq")[MessageState.dead] == n
        timeouts = next(g.fingerprint for g in q.error_groups("dlq") if g.error_type == "TimeoutError")
        print(f"delayq dashboard benchmark on {server.kind}, {machine()}; {n:,} dead letters built in "
              f"{time.perf_counter() - t:.0f} s\n", flush=True)

        def timed(url, repeat=7):
            from django.core.cache import cache

            times = []
            for _ in range(repeat):
                cache.clear()  # measure the real work, not the 1 s summary cache
                t0 = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - t0) * 1000)
                assert response.status_code == 200, (url, response.status_code)
            return statistics.median(times), max(times)

        for label, url in [("overview", "/"), ("dead tab, first page", "/topics/dlq/dead/")]:
            med, worst = timed(url)
            row(f"{label} ({n:,} dead)", f"{med:.1f} ms", f"median of 7, worst {worst:.1f} ms; target < {TARGET_MS} ms")
        deep = q.peek("dlq", "dead", offset=n // 2, limit=1)[0]
        cursor = position_cursor(round(deep.dead_at.timestamp() * 1000), deep.id)
        med, worst = timed(f"/topics/dlq/dead/?after={cursor}")
        row(f"dead tab, page at position {n // 2:,}", f"{med:.1f} ms", f"median of 7, worst {worst:.1f} ms")
        med, worst = timed(f"/topics/dlq/dead/?fp={timeouts}")
        row("dead tab, one error group", f"{med:.1f} ms", f"median of 7, worst {worst:.1f} ms")

        q.redis.config_set("slowlog-log-slower-than", 10_000)  # 10 ms
        q.redis.slowlog_reset()
        op = BulkOperation.objects.create(topic="dlq", total=n, rate_limit=10_000_000, batch_size=100,
                                            scope={"fingerprint": "", "since_ms": 0, "cutoff_ms": q.server_ms()})
        t = time.perf_counter()
        run_bulk_operation(op.pk)
        elapsed = time.perf_counter() - t
        op.refresh_from_db()
        slow = [e for e in q.redis.slowlog_get(1000) if e["command"].upper().startswith(b"EVALSHA")]
        row(f"bulk replay of {n:,} (operation task)", f"{op.moved / elapsed:,.0f} msg/s",
            f"status {op.status}, moved {op.moved:,}, Redis calls over 10 ms: {len(slow)}")

        # Many topics: 1,000 topics with 3 consumer groups each and a few messages; the overview
        # lists 50 a page and searches names before reading any summary.
        t = time.perf_counter()
        for i in range(TOPICS):
            name = f"shop{i:04d}"
            for group in ("billing", "emails"):
                q.configure_group(name, group)
            q.publish_many(name, [b"x"] * 3)
        print(f"  {TOPICS:,} topics x 3 groups built in {time.perf_counter() - t:.0f} s", flush=True)
        med, worst = timed("/")
        size = len(client.get("/").content)
        row(f"overview, {TOPICS + 1:,} topics x 3 groups, first page", f"{med:.1f} ms",
            f"median of 7, worst {worst:.1f} ms, {size / 1024:.0f} KiB of HTML; target < {TARGET_MS} ms")
        first_page = "&".join(["dlq", *(f"shop{i:04d}" for i in range(49))])
        every_group = "/?" + "&".join(f"open={name}" for name in first_page.split("&"))
        med, worst = timed(every_group)
        size = len(client.get(every_group).content)
        row("overview, first page with every topic expanded to its 3 groups", f"{med:.1f} ms",
            f"median of 7, worst {worst:.1f} ms, {size / 1024:.0f} KiB of HTML")
        med, worst = timed("/?q=shop0777")
        row(f"overview, search among {TOPICS + 1:,} topics (1 match)", f"{med:.1f} ms", f"median of 7, worst {worst:.1f} ms")
        med, worst = timed("/topics/shop0777/billing/ready/")
        row("topic page of one group (3 groups, ready tab)", f"{med:.1f} ms", f"median of 7, worst {worst:.1f} ms")
        from django.conf import settings
        settings.DELAYQ_METRICS = True
        med, worst = timed("/metrics")
        size = len(client.get("/metrics").content)
        row(f"Prometheus scrape (/metrics), {TOPICS + 1:,} topics x 3 groups, rendered per scrape", f"{med:.1f} ms",
            f"median of 7, worst {worst:.1f} ms, {size / 1024:.0f} KiB; target < {METRICS_TARGET_MS} ms")
        from dashboard.services.metrics import refresh
        settings.DELAYQ_METRICS_REFRESH = 15.0
        t = time.perf_counter()
        refresh(15.0)
        row("  the same rendered by the refresh_metrics beat task", f"{(time.perf_counter() - t) * 1000:.1f} ms",
            "in the background, every DELAYQ_METRICS_REFRESH seconds")
        med, worst = timed("/metrics")
        row("  a scrape served from that copy (DELAYQ_METRICS_REFRESH=15)", f"{med:.1f} ms",
            f"median of 7, worst {worst:.1f} ms; target < {METRICS_TARGET_MS} ms; figures up to 30 s old")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.write:
        write_section("dashboard", "Dashboard (`python -m bench.dashboard`)",
                      f"Run on {machine()}; server times include view, template and Redis, measured in-process.", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
