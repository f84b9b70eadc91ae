"""The CLI as users run it: python -m queue_core ..."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from queue_core import RetryPolicy

from .helpers import assert_counts, poll

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "queue_core", *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin, timeout=60)


def start_worker(engine_url: str, handler: str, *extra: str) -> subprocess.Popen:
    """`python -m queue_core worker` on topic "jobs" with a handler of tests.queue_core.handlers;
    its stderr is kept for the test to read."""
    env = {**os.environ, "TEST_REDIS_URL": engine_url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "queue_core", "worker", "--url", engine_url, "--topic", "jobs",
                             "--handler", f"tests.queue_core.handlers:{handler}", *extra], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_after(proc, cond):
    """Wait for ``cond`` while the worker process runs, then SIGTERM it: it must exit cleanly."""
    try:
        poll(lambda: cond() or proc.poll() is not None, timeout=20)
        assert proc.poll() is None, proc.stderr.read()
        assert cond()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_publish_and_stats(dq, engine_url):
    out = cli("publish", "--url", engine_url, "--topic", "orders", '{"n": 1}', "--delay", "60")
    assert out.returncode == 0, out.stderr
    mid = out.stdout.strip()
    assert dq.get("orders", mid).json() == {"n": 1}
    assert cli("publish", "--url", engine_url, "--topic", "orders", "-", stdin="from stdin").returncode == 0
    assert_counts(dq, "orders", pending=1, ready=1)
    stats = cli("stats", "--url", engine_url, "-v")
    assert stats.returncode == 0
    line = next(x for x in stats.stdout.splitlines() if x.startswith("orders"))
    assert line.split()[1:6] == ["1", "1", "0", "0", "0"]


def test_publish_with_a_dedup_window_says_when_the_key_was_held(dq, engine_url):
    """--dedup/--window reach publish; a held key prints the holding id and says why on stderr;
    --after chains a message to another."""
    args = ("publish", "--url", engine_url, "--topic", "orders", "--key", "k", "--dedup", "throttle", "--window", "60")
    first = cli(*args, "one")
    again = cli(*args, "two")
    assert first.returncode == again.returncode == 0, again.stderr
    assert first.stdout == again.stdout and first.stderr == ""
    assert again.stderr.strip() == "throttled: the key 'k' is held by this message"
    assert dq.get("orders", first.stdout.strip()).text() == "one"
    refused = cli("publish", "--url", engine_url, "--topic", "orders", "--key", "k", "--dedup", "throttle", "x")
    assert refused.returncode != 0 and "needs window=" in refused.stderr
    parent = first.stdout.strip()
    child = cli("publish", "--url", engine_url, "--topic", "orders", "--after", parent, "--delay", "5", "next")
    assert child.returncode == 0, child.stderr
    assert dq.get("orders", child.stdout.strip()).waiting_for == parent


def test_replay_dry_run_then_for_real(dq, engine_url):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.publish_many("t", ["a", "b", "c"])
    for d in dq.claim("t", 3):
        dq.nack(d, "boom")
    dry = cli("replay", "--url", engine_url, "--topic", "t", "--dry-run")
    assert "would replay 3" in dry.stdout
    assert_counts(dq, "t", dead=3)
    real = cli("replay", "--url", engine_url, "--topic", "t")
    assert real.returncode == 0 and "replayed 3" in real.stdout
    assert_counts(dq, "t", ready=3)


def test_delete_group_asks_first_then_releases_the_groups_messages(dq, engine_url):
    dq.configure_group("t", "audit")
    dq.publish_many("t", ["a", "b"])
    dry = cli("delete-group", "--url", engine_url, "--topic", "t", "--group", "audit")
    assert dry.returncode == 1 and "its 2 message(s)" in dry.stderr and "--yes" in dry.stderr
    assert "audit" in dq.groups("t")
    real = cli("delete-group", "--url", engine_url, "--topic", "t", "--group", "audit", "--yes")
    assert real.returncode == 0 and "2 message(s) released" in real.stdout, real.stderr
    assert "audit" not in dq.groups("t")
    assert_counts(dq, "t", ready=2)                      # the default group keeps its copies
    gone = cli("delete-group", "--url", engine_url, "--topic", "t", "--group", "audit", "--yes")
    assert gone.returncode == 2 and "has no group 'audit'" in gone.stderr


def test_clear_errors(engine_url):
    bad_topic = cli("publish", "--url", engine_url, "--topic", "bad topic", "x")
    assert bad_topic.returncode == 2 and "invalid topic name" in bad_topic.stderr
    bad_handler = cli("worker", "--url", engine_url, "--topic", "t", "--handler", "nope.module:fn")
    assert bad_handler.returncode != 0 and "cannot import 'nope.module'" in bad_handler.stderr
    no_redis = cli("stats", "--url", "redis://127.0.0.1:1/0")
    assert no_redis.returncode == 2 and "redis://127.0.0.1:1/0" in no_redis.stderr


def test_sigterm_lets_the_worker_finish_in_flight_work(dq, engine_url):
    mid = dq.publish("jobs", "x")
    proc = start_worker(engine_url, "slow_ack")
    stop_after(proc, lambda: dq.redis.llen("test:started") == 1)
    assert [x.decode() for x in dq.redis.lrange("test:handled", 0, -1)] == [mid]
    assert_counts(dq, "jobs")
    assert "SIGTERM received" in proc.stderr.read()


def test_global_options_before_the_subcommand_and_version(dq, engine_url):
    dq.publish("orders", "x")
    before = cli("--url", engine_url, "stats", "-v")
    after = cli("stats", "--url", engine_url)
    assert before.returncode == 0 and after.returncode == 0, before.stderr
    assert before.stdout.splitlines()[:2] == after.stdout.splitlines()[:2]
    assert "lifetime: published 1" in before.stdout and "minutes_pruned" not in before.stdout
    assert "DEBUG" not in before.stderr                     # -v is more output, not redis-py's debug log
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("delayq ")
    usage = cli("--help")
    assert usage.stdout.startswith("usage: delayq ")


def test_console_script_imports_a_handler_from_the_working_directory(dq, engine_url, tmp_path):
    """`delayq worker --handler jobs:handle` started in the handler's folder, as with celery."""
    (tmp_path / "myjobs.py").write_text(
        "import os, redis\n"
        "r = redis.Redis.from_url(os.environ['TEST_REDIS_URL'])\n"
        "def handle(message):\n"
        "    r.rpush('test:handled', message.id)\n")
    mid = dq.publish("jobs", "x")
    script = Path(sys.executable).parent / "delayq"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([str(script), "--url", engine_url, "worker", "--topic", "jobs", "--handler", "myjobs:handle"],
                            cwd=tmp_path, env={**env, "TEST_REDIS_URL": engine_url},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stop_after(proc, lambda: dq.redis.llen("test:handled") == 1)
    assert [x.decode() for x in dq.redis.lrange("test:handled", 0, -1)] == [mid]


def test_worker_metrics_port_serves_prometheus_metrics(dq, engine_url):
    """A real worker process with --metrics-port: its histograms and counters, scraped over HTTP
    and parsed with prometheus_client's own parser, match what it did."""
    import socket
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    dq.configure_topic("jobs", visibility_timeout=0.3, retry=RetryPolicy.fixed(3600, max_attempts=5))
    dq.publish_many("jobs", ["ok-1", "ok-2", "ok-3", "fail", "slow"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start_worker(engine_url, "metrics_mix", "--metrics-port", str(port))

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(response.read().decode()) for s in family.samples}

    def value(got, name, **labels):
        return got.get((name, tuple(sorted({"topic": "jobs", "group": "default", **labels}.items()))), 0)

    def done():
        try:
            got = scrape()
        except OSError:
            return False
        return (value(got, "delayq_worker_messages_total", outcome="acked") == 4
                and value(got, "delayq_worker_messages_total", outcome="nacked") == 1)
    try:
        poll(done, timeout=20)
        got = scrape()
        assert value(got, "delayq_worker_lateness_seconds_count") == 5
        assert value(got, "delayq_worker_handler_seconds_count") == 5
        assert value(got, "delayq_worker_handler_seconds_bucket", le="0.5") == 4   # all but the slow one
        assert value(got, "delayq_worker_lease_extensions_total") >= 1             # the slow one's lease
        assert value(got, "delayq_worker_lease_losses_total") == 0
        in_flight = [v for (name, _), v in got.items() if name == "delayq_worker_in_flight"]
        assert in_flight == [0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_counts(dq, "jobs", retrying=1)


def test_worker_metrics_port_in_use_is_one_clear_line(engine_url):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "queue_core", "worker", "--url", engine_url, "--topic", "jobs",
                              "--handler", "tests.queue_core.handlers:record", "--metrics-port", str(port)],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and f"--metrics-port {port}: cannot listen on 127.0.0.1" in out.stderr


def test_limits_shows_and_sets_a_groups_dispatch_limits(dq, engine_url):
    dq.configure_topic("mail")
    dq.configure_group("mail", "default", visibility_timeout=12)
    out = cli("limits", "--url", engine_url, "--topic", "mail", "--rate", "100/1", "--max-in-flight", "50",
              "--key-rate", "5/1", "--fairness", '{"acme": 3, "*": 1}')
    assert out.returncode == 0, out.stderr
    assert "at most 100 per 1 s; at most 50 in flight; per fairness key 5 per 1 s" in out.stdout
    cfg = dq.group_config("mail")
    assert (cfg.rate, cfg.max_in_flight, cfg.key_rate, cfg.fairness) == ((100, 1.0), 50, (5, 1.0), {"acme": 3, "*": 1})
    assert cfg.visibility_timeout == 12                      # the group's other settings are kept
    out = cli("limits", "--url", engine_url, "--topic", "mail", "--rate", "none", "--max-in-flight", "none")
    assert out.returncode == 0 and dq.group_config("mail").rate is None
    bad = cli("limits", "--url", engine_url, "--topic", "mail", "--rate", "0/1")
    assert bad.returncode == 2 and "at least 1" in bad.stderr
    missing = cli("limits", "--url", engine_url, "--topic", "nope", "--rate", "5/1")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    pub = cli("publish", "--url", engine_url, "--topic", "mail", "--fairness-key", "acme", "--priority", "7", "hi")
    assert pub.returncode == 0, pub.stderr
    got = dq.get("mail", pub.stdout.strip())
    assert (got.priority, got.fairness_key) == (7, "acme")
