"""Sentinel: a master, a replica and three Sentinels on loopback. A real worker process and a
publisher reach the master through redis+sentinel://; the master is SIGKILLed mid-traffic."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from queue_core import DelayQueue, NotReplicated, localserver
from tests.conftest import run_async, wait_for

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "ha"


def start_worker(url: str, ledger_url: str, ledger_key: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "TEST_LEDGER_URL": ledger_url, "TEST_LEDGER_KEY": ledger_key, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "queue_core", "--url", url, "worker", "--topic", TOPIC,
                                 "--handler", "tests.ha.handlers:record", "--concurrency", "4", "--grace", "5"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_the_sentinel_url_reaches_the_master_and_says_what_is_wrong(replicated):
    replicated.add_sentinels()
    q = DelayQueue.from_url(replicated.sentinel_url, actor="test")
    msg_id = q.publish("t", b"hello")
    # Written to the master the Sentinels name (the replica is read-only and would refuse it).
    assert DelayQueue(replicated.master.client()).get("t", msg_id).payload == b"hello"
    wrong = DelayQueue.from_url(replicated.sentinel_url.replace("/mymaster/", "/nosuchservice/"),
                                socket_connect_timeout=1)
    with pytest.raises(redis.RedisError, match="nosuchservice"):
        wrong.publish("t", b"x")


def test_the_asyncio_client_through_sentinel(replicated):
    """AsyncDelayQueue on redis.asyncio's Sentinel client writes to the master the Sentinels name."""
    from queue_core import AsyncDelayQueue

    replicated.add_sentinels()

    async def body():
        async with AsyncDelayQueue.from_url(replicated.sentinel_url, actor="test") as q:
            msg_id = await q.publish("t", b"hello")
            [delivery] = await q.claim("t")
            await q.ack(delivery)
            return msg_id, delivery.id
    msg_id, claimed = run_async(body())
    assert claimed == msg_id
    assert DelayQueue(replicated.master.client()).stats("t")["acked"] == 1


def test_a_failover_loses_no_acknowledged_publish(replicated, redis_server, redis_url, record_property):
    """Every publish that returned (wait_replicas=1) is handled at least once after the master is
    killed and the replica promoted; duplicates are counted and reported, not forbidden."""
    replicated.add_sentinels()
    url = replicated.sentinel_url + "?wait_replicas=1&wait_timeout=2"
    q = DelayQueue.from_url(url, actor="publisher", socket_timeout=2, socket_connect_timeout=1)
    q.configure_topic(TOPIC, visibility_timeout=3)
    ledger = redis.Redis.from_url(redis_url)
    log = replicated.tmp / "worker.log"
    worker = start_worker(replicated.sentinel_url, redis_url, "ha:handled", log)
    confirmed: dict[str, str] = {}        # key -> id, acknowledged by a replica
    on_new_master: dict[str, str] = {}    # key -> id, written to the promoted master before it had a replica
    errors = 0
    old_port = replicated.master.port
    killed = replaced = False
    deadline = time.monotonic() + 90
    i = 0
    try:
        after_replacement = 0
        while after_replacement < 100:     # publishes confirmed by the new master's replica
            assert time.monotonic() < deadline, (f"publisher stuck: {len(confirmed)} confirmed, {errors} errors, "
                                                 f"killed={killed} replaced={replaced}")
            assert worker.poll() is None, log.read_text()[-2000:]
            key = f"m{i}"
            try:
                confirmed[key] = q.publish(TOPIC, {"i": i}, key=key)
                after_replacement += replaced
                i += 1
            except NotReplicated as exc:
                assert killed, f"refused before the failover: {exc}"
                on_new_master[key] = exc.ids[0]
                i += 1
            except redis.RedisError:
                errors += 1           # no master yet: publish the same key again (safe: deduplicated)
                time.sleep(0.05)
            if i >= 150 and not killed and ledger.llen("ha:handled") >= 100:   # the worker is busy: now
                replicated.master.process.kill()
                replicated.master.process.wait()
                killed = True
            if killed and not replaced and replicated.master_port() != old_port:
                # Promoted: give the new master a replica so acknowledged publishes resume.
                replicated.replicas.append(localserver.start_replica(replicated.master_port(),
                                                                     data_dir=replicated.tmp / "replica1"))
                replaced = True
        expected = set(confirmed.values()) | set(on_new_master.values())

        def all_handled() -> bool:
            assert worker.poll() is None, log.read_text()[-2000:]
            return expected <= {m.decode() for m in ledger.lrange("ha:handled", 0, -1)}
        try:
            wait_for(all_handled, 60, "every acknowledged publish handled")
        except AssertionError:
            missing = sorted(expected - {m.decode() for m in ledger.lrange("ha:handled", 0, -1)})
            states = {m: (q.get(TOPIC, m).state.value if q.get(TOPIC, m) else "gone") for m in missing[:20]}
            raise AssertionError(f"{len(missing)} of {len(expected)} acknowledged publishes never handled; "
                                 f"their states now: {states}; worker log: {log.read_text()[-3000:]}") from None
    finally:
        worker.terminate()
        worker.wait(30)
        q.redis.close()
    handled = [m.decode() for m in ledger.lrange("ha:handled", 0, -1)]
    duplicates = len(handled) - len(set(handled))
    record_property("duplicates", duplicates)
    record_property("publish_errors_during_failover", errors)
    print(f"failover: {len(confirmed)} confirmed, {len(on_new_master)} unconfirmed on the new master, "
          f"{errors} publish errors while no master, {duplicates} duplicate handlings")
    assert killed and replaced and errors > 0      # the failover really happened under traffic
    assert worker.returncode == 0


def start_scheduler(url: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "queue_core", "--url", url, "scheduler"], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out, stderr=subprocess.STDOUT)


def test_schedules_survive_a_failover_and_tick_exactly_once(replicated):
    """Schedules live in Redis: after the master is SIGKILLed and the replica promoted, a
    ``delayq scheduler`` reaching Redis through Sentinel goes on firing them. On the promoted
    master every tick is there once (ticks the old master fired but had not yet replicated are
    fired again, under the same dedup key, as the schedule's replicated state says they are due),
    none is missing from the first tick to the last, and a paused schedule is still paused."""
    replicated.add_sentinels()
    q = DelayQueue.from_url(replicated.sentinel_url, actor="test", socket_timeout=2, socket_connect_timeout=1)
    q.configure_topic("ticks")
    q.upsert_schedule("beat", topic="ticks", every=0.2, catchup_window=60)
    q.upsert_schedule("quiet", topic="ticks", every=0.2)
    q.pause_schedule("quiet", note="kept across the failover")
    assert q.redis.execute_command("WAIT", 1, 5000) >= 1          # the schedules reached the replica
    log = replicated.tmp / "scheduler.log"
    scheduler = start_scheduler(replicated.sentinel_url, log)
    old_port = replicated.master.port

    def fired() -> int:
        try:
            return q.schedule("beat").runs
        except redis.RedisError:
            return 0
    try:
        wait_for(lambda: fired() >= 10, 30, "ten ticks fired before the failover")
        replicated.master.process.kill()
        replicated.master.process.wait()
        killed_at = time.time() * 1000
        wait_for(lambda: replicated.master_port() != old_port, 60, "a replica promoted by the Sentinels")
        q.redis.connection_pool.disconnect()                      # the next call asks the Sentinels again

        def ticks_after_failover() -> int:
            try:
                return sum(1 for line in q.schedule("beat").ticks if line.tick_ms > killed_at + 1000)
            except redis.RedisError:
                return 0
        wait_for(lambda: ticks_after_failover() >= 5, 60, "ticks fired on the promoted master")
        assert scheduler.poll() is None, log.read_text()[-2000:]
    finally:
        scheduler.terminate()
        scheduler.wait(30)
    assert scheduler.returncode == 0, log.read_text()[-2000:]
    beat, quiet = q.schedule("beat"), q.schedule("quiet")
    assert quiet.paused and quiet.paused["note"] == "kept across the failover" and quiet.runs == 0
    ticks = []
    while batch := q.claim("ticks", 500):
        ticks += [int(d.message.headers["delayq-tick"]) for d in batch if d.message.headers["delayq-schedule"] == "beat"]
        q.ack_many(batch)
    assert len(ticks) == len(set(ticks)), "a tick published twice on the promoted master"
    ticks.sort()
    assert ticks[-1] > killed_at + 1000 and ticks == list(range(ticks[0], ticks[-1] + 1, 200)), "a tick is missing"
    assert beat.missed == 0 and beat.runs == len(ticks)
