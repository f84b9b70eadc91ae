"""The engine on a 3-master Redis Cluster: a core suite that calls every script, with topics on
different nodes. CROSSSLOT cannot happen by construction (one hash tag per topic, every key in
KEYS); this proves it on a real cluster."""

import threading
import time

import pytest

from queue_core import LeaseLost, MessageState, RetryPolicy, Worker
from queue_core.keys import INDEX_HASH_CHARS, INDEX_LANES, index_log_keys, partition_of
from queue_core.scripts import SCRIPT_NAMES

pytestmark = pytest.mark.slow
TOPICS = ["orders", "emails", "webhooks", "billing.eu", "t:42", "audit-log"]


def test_topics_spread_over_the_nodes(cq, node_of):
    owners = {node_of(cq, t)[0] for t in TOPICS}
    assert len(owners) >= 2, "pick topic names on different nodes"


def test_every_script_runs_on_the_cluster(cq):
    """publish, claim, ack, nack, extend, deliver_now, remove, replay, replay_dead, replay_edited,
    purge, counts, get, peek, find, search, layout, release, delete_group, reschedule, kill (and
    schedule_tick, in its own test below): each at least once,
    on topics owned by different nodes."""
    import hashlib

    for topic in TOPICS:
        cq.configure_topic(topic, retry=RetryPolicy.fixed(0, max_attempts=1), visibility_timeout=30)
        ids = cq.publish_many(topic, [f"{topic}-{i}" for i in range(1200)])        # publish (pipelined)
        later = cq.publish(topic, "later", delay=3600, key="k1")                  # publish
        assert cq.counts(topic)[MessageState.ready] == 1200                        # counts
        ds = cq.claim(topic, 3)                                                    # claim
        cq.ack(ds[0])                                                              # ack
        cq.extend(ds[1], 60)                                                       # extend
        assert cq.nack(ds[1], "boom") is MessageState.dead                         # nack
        cq.reject(ds[2], "bad")
        assert cq.get(topic, ids[1]).state is MessageState.dead                    # get
        assert len(cq.peek(topic, "ready", limit=5)) == 5                          # peek
        assert [loc.topic for loc in cq.find(ids[7]).found] == [topic]             # find
        hit = cq.search(topic, "ready", f"id:{ids[7]}")                            # search
        assert [m.id for m in hit.messages] == [ids[7]] and hit.done
        cq.deliver_now(topic, later)                                               # deliver_now
        cq.cancel(topic, later)                                                    # remove
        assert cq.replay(topic, [ids[1]]) == 1                                     # replay
        assert cq.replay_dead(topic) == 1                                          # replay_dead
        d = cq.claim(topic, 1)[0]
        cq.nack(d, "again")
        seen = hashlib.sha1(cq.get(topic, d.id).payload).hexdigest()
        cq.replay_edited(topic, d.id, b"fixed", seen)                              # replay_edited
        assert cq.purge(topic, "ready") == 1199                                    # purge
        assert sum(cq.counts(topic).values()) == 0
        with pytest.raises(LeaseLost):
            cq.ack(ds[0])
    assert set(cq.topics()) == set(TOPICS)
    # Groups and partitions: layout (configure_group, configure_topic), release, delete_group.
    cq.configure_topic("parts", partitions=6)                                      # layout
    cq.configure_group("parts", "billing")                                         # layout
    ids = cq.publish_many("parts", [f"p{i}" for i in range(60)])
    held = cq.claim("parts", 60, group="billing")
    assert cq.release(held) == 60                                                  # release
    assert cq.delete_group("parts", "billing") == 60                               # delete_group
    # Operator actions on a partitioned topic: reschedule and kill, by each id's partition.
    cq.configure_topic("parts", partitions=6, retry=RetryPolicy.fixed(3600, max_attempts=5))
    failing = cq.claim("parts", 12)
    for d in failing:
        cq.nack(d, "later")
    retrying = [d.id for d in failing]
    assert cq.reschedule_many("parts", retrying[:6], delay=60) == [0] * 6      # reschedule
    assert cq.kill_many("parts", retrying[6:]) == [0] * 6                      # kill
    assert cq.counts("parts")[MessageState.dead] == 6
    forecast = cq.due_forecast("parts", horizon=7200, bucket=60)                   # due_forecast
    assert sum(forecast.counts) == 6 and forecast.overdue == 0                     # the rescheduled six
    assert cq.purge("parts", "dead", hold="op-1") == 6                             # purge holding for undo
    assert cq.undo("parts", "op-1").restored == 6                                  # undo
    assert cq.counts("parts")[MessageState.dead] == 6
    # The overview's batched read falls back to one group at a time on a cluster, same figures.
    summary = cq.summaries([("parts", "default")])[("parts", "default")]
    assert summary["counts"] == cq.counts("parts") and summary["paused"] is False
    cq.purge("parts", "retrying")
    cq.purge("parts", "dead")
    cq.ack_many(cq.claim("parts", 60))
    assert cq.message_count("parts") == 0 and len(ids) == 60
    assert set(SCRIPT_NAMES) == {"publish", "claim", "ack", "nack", "extend", "deliver_now", "remove", "replay",
                                 "replay_dead", "replay_edited", "purge", "counts", "get", "peek", "layout",
                                 "delete_group", "release", "reschedule", "kill", "schedule_tick", "find", "search",
                                 "cancel", "report", "index", "batch", "due_forecast", "undo", "sweep_index"}
    # cancel, report: test_cancel_running_on_every_master; index, sweep_index:
    # test_indexed_fields_live_with_their_partitions below; batch: tests/cluster/test_batch.py


def test_partitions_spread_over_every_master_and_one_worker_drains_them(cq, redis_cluster):
    """Six partitions of one topic land on all three masters; a worker (one fetcher per partition
    on a cluster) drains them all."""
    cq.configure_topic("spread", partitions=6)
    cq.configure_group("spread", "billing")
    owners = {cq.redis.get_node_from_key(cq.keys("spread", p).ready).port for p in range(6)}
    assert owners == {s.port for s in redis_cluster}
    ids = cq.publish_many("spread", [str(i) for i in range(600)])
    per_node = {}
    for p in range(6):
        port = cq.redis.get_node_from_key(cq.keys("spread", p).ready).port
        per_node[port] = per_node.get(port, 0) + cq.redis.zcard(cq.keys("spread", p).ready)
    assert sum(per_node.values()) == 600 and all(per_node.values())
    seen = set()
    lock = threading.Lock()

    def handler(message):
        with lock:
            seen.add(message.id)
    w = Worker(cq, {"spread": handler}, group="billing", concurrency=4)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        from tests.conftest import wait_for

        wait_for(lambda: sum(cq.counts("spread", group="billing").values()) == 0, 30, "billing drained")
    finally:
        w.stop()
        runner.join(15)
    assert seen == set(ids)
    assert cq.counts("spread")[MessageState.ready] == 600      # the default group still has them all


def test_a_worker_fetches_from_partitions_added_while_it_runs(cq, cluster_url):
    """On a cluster each partition has its own fetcher: partitions added by configure_topic while
    a worker runs get theirs (the blocking and the asyncio worker), else their messages would wait
    for a restart."""
    import asyncio

    from queue_core import AsyncDelayQueue, AsyncWorker
    from tests.conftest import run_async, wait_for

    cq.configure_topic("grows", partitions=1)
    seen = set()
    w = Worker(cq, {"grows": lambda m: seen.add(m.id)}, concurrency=2, idle_wait=30)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        first = cq.publish("grows", "first")
        wait_for(lambda: first in seen and not sum(cq.counts("grows").values()), 10, "the first message handled")
        cq.configure_topic("grows", partitions=4)
        ids = cq.publish_many("grows", [str(i) for i in range(40)])
        assert {partition_of(i) for i in ids} == {0, 1, 2, 3}
        wait_for(lambda: set(ids) <= seen, 10, "every new partition drained")
    finally:
        w.stop()
        runner.join(15)
    assert not runner.is_alive()

    async def body():
        async with AsyncDelayQueue.from_url(cluster_url, actor="async-grows") as q:
            await q.configure_topic("grows-async", partitions=1)
            got = set()

            async def handler(message):
                got.add(message.id)
            worker = AsyncWorker(q, {"grows-async": handler}, concurrency=2, idle_wait=30)
            task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
            try:
                first = await q.publish("grows-async", "first")
                deadline = time.monotonic() + 10
                while first not in got or sum((await q.counts("grows-async")).values()):
                    assert time.monotonic() < deadline, "the first message was not handled"
                    await asyncio.sleep(0.02)
                await q.configure_topic("grows-async", partitions=4)
                ids = await q.publish_many("grows-async", [str(i) for i in range(40)])
                deadline = time.monotonic() + 10
                while not set(ids) <= got:
                    assert time.monotonic() < deadline, "a new partition was not drained"
                    await asyncio.sleep(0.02)
            finally:
                worker.stop()
                await task
            return ids
    ids = run_async(body())
    assert {partition_of(i) for i in ids} == {0, 1, 2, 3}


def test_a_partition_removed_and_added_again_gets_a_fetcher_again(cq):
    """The fetcher of a partition that configure_topic removed ends; when the partition comes back,
    partition 0's fetcher starts another for it."""
    from tests.conftest import wait_for

    cq.configure_topic("regrows", partitions=3)
    seen = set()
    w = Worker(cq, {"regrows": lambda m: seen.add(m.id)}, concurrency=2, idle_wait=0.5)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()

    def fetching():
        return sum(t.is_alive() for t in w._fetchers)
    try:
        wait_for(lambda: fetching() == 3, 10, "a fetcher per partition")
        cq.configure_topic("regrows", partitions=1)
        wait_for(lambda: fetching() == 1, 10, "the removed partitions' fetchers ended")
        cq.configure_topic("regrows", partitions=3)
        ids = cq.publish_many("regrows", [str(i) for i in range(30)])
        assert {partition_of(i) for i in ids} == {0, 1, 2}
        wait_for(lambda: set(ids) <= seen, 10, "the partitions added again drained")
        assert fetching() == 3
    finally:
        w.stop()
        runner.join(15)
    assert not runner.is_alive()


def test_cancel_running_on_every_master(cq, redis_cluster):
    """cancel(..., running=True) on messages a worker runs in six partitions (all three masters):
    every handler hears of it at its lease extension (Cancelled from check_cancelled), each
    message ends dead "cancelled by ops" with the progress and log its handler reported."""
    from queue_core import Cancelled
    from tests.conftest import wait_for

    cq.configure_topic("spread", partitions=6, visibility_timeout=30)
    owners = {cq.redis.get_node_from_key(cq.keys("spread", p).ready).port for p in range(6)}
    assert owners == {s.port for s in redis_cluster}
    ids = cq.publish_many("spread", [str(i) for i in range(12)])
    running, stopped, lock = set(), set(), threading.Lock()

    def handler(message):
        message.progress(0.5, "half")
        message.log(f"started {message.text()}")
        with lock:
            running.add(message.id)
        for _ in range(3000):   # 30 s of steps unless cancelled
            try:
                message.check_cancelled()
            except Cancelled:
                with lock:
                    stopped.add(message.id)
                raise
            time.sleep(0.01)
    w = Worker(cq, {"spread": handler}, concurrency=12)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        wait_for(lambda: len(running) == 12, 15, "all twelve running")
        wait_for(lambda: all(cq.journal("spread", mid).progress == 0.5 for mid in ids), 5, "progress shown")
        assert {cq.layout("spread").partitions} == {6}
        assert cq.cancel_many("spread", ids, actor="ops") == [0] * 12
        wait_for(lambda: stopped == set(ids), 5, "every handler told")
    finally:
        w.stop()
        runner.join(15)
    assert cq.counts("spread")[MessageState.dead] == 12 and w.processed == 0 and w.failed == 0
    for mid in ids:
        m = cq.get("spread", mid)
        assert m.history[-1].event == "cancelled" and m.last_error.message == "cancelled by ops"
        assert [line.text for line in cq.journal("spread", mid).lines] == [f"started {m.text()}"]
    cq.purge("spread", "dead")


def test_the_asyncio_worker_cancels_running_handlers_on_every_master(cluster_url, redis_cluster):
    """cancel_many(..., running=True) from the asyncio client on messages an AsyncWorker runs in six
    partitions (all three masters): each handler's task is cancelled (CancelledError at its await,
    message.cancelled set), each message ends dead "cancelled by ops", and the worker goes on
    handling new messages."""
    import asyncio

    from queue_core import AsyncDelayQueue, AsyncWorker
    from tests.conftest import run_async

    async def body():
        async with AsyncDelayQueue.from_url(cluster_url, actor="async-cluster") as q:
            await q.configure_topic("spread", partitions=6, visibility_timeout=30)
            ids = await q.publish_many("spread", [str(i) for i in range(12)])
            owners = {q.redis.get_node_from_key(q.keys("spread", partition_of(mid)).ready).port for mid in ids}
            running, stopped, handled = set(), {}, []

            async def handler(message):
                if message.text() == "next":
                    handled.append(message.id)
                    return
                running.add(message.id)
                try:
                    await asyncio.sleep(30)   # the handler's long await
                except asyncio.CancelledError:
                    stopped[message.id] = message.cancelled
                    raise
            worker = AsyncWorker(q, {"spread": handler}, concurrency=12)
            task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
            try:
                deadline = time.monotonic() + 15
                while len(running) < 12:
                    assert time.monotonic() < deadline, f"{len(running)} of 12 handlers running"
                    await asyncio.sleep(0.02)
                codes = await q.cancel_many("spread", ids, actor="ops")
                deadline = time.monotonic() + 5
                while set(stopped) != set(ids):
                    assert time.monotonic() < deadline, f"{len(stopped)} of 12 handlers told"
                    await asyncio.sleep(0.01)
                nxt = await q.publish("spread", "next")   # the runners survived their cancels
                while handled != [nxt]:
                    assert time.monotonic() < deadline + 5, "the worker stopped handling messages"
                    await asyncio.sleep(0.01)
            finally:
                worker.stop()
                await asyncio.wait_for(task, 15)
            messages = [await q.get("spread", mid) for mid in ids]
            return owners, codes, stopped, messages, worker, await q.counts("spread")
    owners, codes, stopped, messages, worker, counts = run_async(body(), 60)
    assert owners == {s.port for s in redis_cluster}                   # running on every master
    assert codes == [0] * 12 and all(stopped.values())
    assert counts[MessageState.dead] == 12 and sum(counts.values()) == 12
    for m in messages:
        assert m.state is MessageState.dead and m.history[-1].event == "cancelled"
        assert m.history[-1].actor == "ops" and m.last_error.message == "cancelled by ops"
    assert worker.processed == 1 and worker.failed == 0


def test_read_model_on_the_cluster(cq):
    cq.configure_topic("orders", retry=RetryPolicy.fixed(0, max_attempts=1))
    cq.publish_many("orders", ["a", "b"])
    for d in cq.claim("orders", 2):
        cq.nack(d, "db down")
    [group] = cq.error_groups("orders")
    assert group.count == 2 and len(cq.group_page("orders", group.fingerprint).messages) == 2
    assert cq.throughput("orders")["dead_last_hour"] == 2
    cq.heartbeat(["orders", "emails"], "w1")
    assert cq.workers("orders") == ["w1"] and cq.workers("emails") == ["w1"]
    cq.heartbeat(["orders", "emails"], "w2", details={"host": "box", "pid": 7})   # keys on several nodes
    report = cq.live_workers([("orders", "default"), ("emails", "default"), ("webhooks", "default")])
    assert [(w.id, w.topics, w.host) for w in report.workers] == [("w1", ("orders", "emails"), None),
                                                                   ("w2", ("orders", "emails"), "box")]
    assert report.unattended == [("webhooks", "default")]


def test_a_worker_serves_topics_on_different_nodes(cq, node_of):
    by_node = {}
    for t in TOPICS + ["alpha", "beta", "gamma", "delta", "x1", "x2", "x3"]:
        by_node.setdefault(node_of(cq, t)[0], t)
    topics = list(by_node.values())
    assert len(topics) == 3  # one topic on each master
    done = {t: 0 for t in topics}
    lock = threading.Lock()

    def handler(message):
        with lock:
            done[message.topic] += 1
    for t in topics:
        cq.publish_many(t, ["x"] * 200)
        cq.publish(t, "soon", delay=0.2)
    w = Worker(cq, {t: handler for t in topics}, concurrency=4)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        from tests.conftest import wait_for

        wait_for(lambda: all(sum(cq.counts(t).values()) == 0 for t in topics), 30, "all topics drained")
    finally:
        w.stop()
        runner.join(15)
    assert done == {t: 201 for t in topics}


def test_the_asyncio_client_and_worker_on_the_cluster(cluster_url, redis_cluster):
    """AsyncDelayQueue on redis.asyncio's cluster client: partitions on every master, the read
    model across nodes (SCAN on each), and an AsyncWorker (a fetcher per partition) draining them."""
    import asyncio

    from queue_core import AsyncDelayQueue, AsyncWorker
    from tests.conftest import run_async

    async def body():
        async with AsyncDelayQueue.from_url(cluster_url, actor="async-cluster") as q:
            assert q.cluster
            await q.configure_topic("spread", partitions=6)
            ids = await q.publish_many("spread", [str(i) for i in range(300)])
            assert (await q.counts("spread"))[MessageState.ready] == 300
            assert await q.undocumented_keys() == []
            seen = set()

            async def handler(message):
                seen.add(message.id)
            worker = AsyncWorker(q, {"spread": handler}, concurrency=4)
            task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
            deadline = time.monotonic() + 30
            while len(seen) < 300 or sum((await q.counts("spread")).values()):
                assert time.monotonic() < deadline, "the AsyncWorker did not drain the cluster topic"
                await asyncio.sleep(0.05)
            worker.stop()
            await task
            return seen, ids
    seen, ids = run_async(body())
    assert seen == set(ids)


def test_dispatch_control_on_the_cluster(cq, redis_cluster):
    """Fairness, priorities and a group-wide in-flight limit on a topic whose 6 partitions sit on
    the 3 masters: every partition's claim takes turns between its keys, and the limit is kept as
    a share per partition (the sum never exceeds it)."""
    cq.configure_topic("fair", partitions=6)
    cq.configure_group("fair", "capped", max_in_flight=8)      # shares 2, 2, 1, 1, 1, 1
    owners = {cq.redis.get_node_from_key(cq.keys("fair", p).ready).port for p in range(6)}
    assert owners == {s.port for s in redis_cluster}
    for p in range(6):
        cq.publish_many("fair", ["a"] * 300, fairness_key=f"A{p}", partition=p)
        cq.publish_many("fair", ["b"] * 5, fairness_key=f"B{p}", partition=p)
        cq.publish("fair", "urgent", fairness_key=f"A{p}", partition=p, priority=9)
    for p in range(6):
        got = [d.message.text() for d in cq.claim_batch("fair", 12, partition=p).deliveries]
        assert got.count("b") == 5 and got[0] in ("urgent", "b")   # B's turn at once; A's urgent first of A
        assert "urgent" in got
    capped = cq.claim("fair", 100, group="capped")
    assert len(capped) == 8                                    # the whole group, over 6 partitions
    assert cq.claim("fair", 100, group="capped") == []
    cq.ack_many(capped[:3])
    assert len(cq.claim("fair", 100, group="capped")) == 3
    state = cq.dispatch_state("fair", "capped")
    assert state.in_flight == 8 and state.reasons == {"max_in_flight": 6 * 306 - 11}


def test_a_group_rate_limit_on_the_cluster(cq):
    """A group's rate is split over its partitions (one bucket each, on their own masters): 120/s
    over 6 partitions is 20/s each, claimed one at a time every 50 ms, and the claim says when."""
    cq.configure_topic("rated", partitions=6)
    cq.configure_group("rated", "default", rate=(120, 1.0))
    for p in range(6):
        cq.publish_many("rated", ["x"] * 5, partition=p)
    for p in range(6):
        first = cq.claim_batch("rated", 5, partition=p)
        assert len(first.deliveries) == 1
        again = cq.claim_batch("rated", 5, partition=p)
        assert again.deliveries == [] and 0 < again.next_due_ms - again.now_ms <= 50
    assert cq.dispatch_state("rated").reasons == {"rate": 24}


def test_schedules_spread_over_the_masters_and_each_tick_fires_once(cq, cluster_url, redis_cluster):
    """30 schedules on a 6-partition topic are homed on every master; two schedulers (cluster
    clients) fire each one's due tick once (schedule_tick)."""
    from queue_core import DelayQueue
    from queue_core.scheduler import Scheduler
    from tests.conftest import wait_for

    cq.configure_topic("ticks", partitions=6)
    hour = cq.server_ms() // 3_600_000 * 3_600_000
    for i in range(30):
        s = cq.upsert_schedule(f"s{i}", topic="ticks", every=3600, catchup_window=7200)
        pk = cq.keys("ticks", s.partition).p
        cq.redis.hset(pk.schedule_runs, f"s{i}|next", hour)       # due now: its tick of this hour
        cq.redis.zadd(pk.schedule_due, {f"s{i}": hour})
    homes = {cq.redis.get_node_from_key(cq.keys("ticks", s.partition).p.schedule_due).port for s in cq.schedules()}
    assert homes == {s.port for s in redis_cluster}
    schedulers = [Scheduler(DelayQueue.from_url(cluster_url)) for _ in range(2)]
    for sch in schedulers:
        sch.start()
    try:
        wait_for(lambda: all(s.runs == 1 for s in cq.schedules()), 30, "every schedule fired its tick")
    finally:
        for sch in schedulers:
            sch.stop()
            sch.join(10)
    keys = [d.message.key for d in cq.claim("ticks", 100)]
    assert sorted(keys) == sorted(f"schedule:s{i}:{hour}" for i in range(30))
    assert sum(sch.fired for sch in schedulers) == 30


def test_dedup_windows_and_chains_on_the_cluster(cq):
    """A dedup window lives in its key's partition and a chained message in its parent's, so the
    publish and the ack that releases it each touch one partition, whichever master holds it."""
    cq.configure_topic("flows", partitions=6)
    parents = [cq.publish("flows", f"p{i}", key=f"order-{i}", dedup="unique_for", window=600) for i in range(12)]
    children = [cq.publish("flows", f"c{i}", after=p, delay=0) for i, p in enumerate(parents)]
    assert len({partition_of(p) for p in parents}) > 1                     # spread over partitions
    assert [partition_of(c) for c in children] == [partition_of(p) for p in parents]
    assert all(cq.get("flows", c).waiting_for == p for c, p in zip(children, parents, strict=True))
    while batch := cq.claim("flows", 50):
        cq.ack_many(batch)
    assert sum(cq.counts("flows").values()) == 0 and cq.message_count("flows") == 0
    again = cq.publish("flows", "p0 again", key="order-0", dedup="unique_for", window=600)
    assert again == parents[0] and again.outcome == "duplicate"
    first = cq.publish("flows", "v1", key="search-7", dedup="debounce", delay=60)
    assert cq.publish("flows", "v2", key="search-7", dedup="debounce", delay=60).outcome == "debounced"
    assert cq.get("flows", first).text() == "v2"


def test_throttle_on_the_cluster_answers_with_the_holder_in_each_keys_partition(cq, redis_cluster):
    """dedup="throttle" on keys spread over six partitions (all three masters): within the window a
    publish of a key returns the id that took it, from that key's partition, whether or not the
    message is still there; strict refuses; a closed window in one partition frees that key only."""
    from queue_core import DuplicateMessage

    cq.configure_topic("pings", partitions=6)
    keys = [f"device-{i}" for i in range(24)]
    first = {k: cq.publish("pings", f"{k} 1", key=k, dedup="throttle", window=600) for k in keys}
    assert all(r.outcome == "published" for r in first.values()) and len(set(first.values())) == 24
    owners = {cq.redis.get_node_from_key(cq.keys("pings", partition_of(mid)).ready).port for mid in first.values()}
    assert owners == {s.port for s in redis_cluster}                   # keys on every master
    for k, mid in first.items():                                       # each window in its key's partition
        assert cq.redis.zscore(cq.keys("pings", partition_of(mid)).dedup_until, k) > 0
    again = {k: cq.publish("pings", f"{k} 2", key=k, dedup="throttle", window=600) for k in keys}
    assert again == first and {r.outcome for r in again.values()} == {"throttled"}
    while batch := cq.claim("pings", 50):
        cq.ack_many(batch)
    assert cq.message_count("pings") == 0
    later = {k: cq.publish("pings", f"{k} 3", key=k, dedup="throttle", window=600) for k in keys}
    assert later == first and {r.outcome for r in later.values()} == {"throttled"}   # gone, still held
    with pytest.raises(DuplicateMessage) as info:
        cq.publish("pings", "strict", key=keys[5], dedup="throttle", window=600, strict=True)
    assert info.value.existing_id == first[keys[5]]
    assert sum(cq.counts("pings").values()) == 0                      # nothing stored meanwhile
    freed = keys[7]
    cq.redis.zadd(cq.keys("pings", partition_of(first[freed])).dedup_until, {freed: 1}, xx=True)   # closed
    fresh = cq.publish("pings", "after the window", key=freed, dedup="throttle", window=600)
    assert fresh != first[freed] and fresh.outcome == "published"
    assert partition_of(fresh) == partition_of(first[freed])           # the key routes to its partition
    assert cq.publish("pings", "x", key=keys[8], dedup="throttle", window=600) == first[keys[8]]
    assert cq.counts("pings")[MessageState.ready] == 1


def test_sub_second_schedules_tick_once_through_a_scheduler_sigkill(cq, cluster_url, tmp_path):
    """12 schedules every 0.2 s over 6 partitions (every master), two ``delayq scheduler``
    processes; one is SIGKILLed mid-run and started again. Every schedule's ticks from its first
    to its last are each published once: no duplicate, no gap, none counted missed."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import wait_for

    root = Path(__file__).resolve().parents[2]

    def scheduler(i: int) -> subprocess.Popen:
        with (tmp_path / f"scheduler{i}.log").open("ab") as out:
            return subprocess.Popen([sys.executable, "-m", "queue_core", "--url", cluster_url, "scheduler"], cwd=root,
                                    env={**os.environ, "PYTHONPATH": str(root)}, stdout=out, stderr=subprocess.STDOUT)
    cq.configure_topic("fast", partitions=6)
    for i in range(12):
        cq.upsert_schedule(f"f{i}", topic="fast", every=0.2, catchup_window=60)

    def runs() -> int:
        return sum(s.runs for s in cq.schedules() if s.topic == "fast")
    procs = [scheduler(0), scheduler(1)]
    try:
        wait_for(lambda: runs() >= 60, 60, "five ticks of each schedule")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        procs[0] = scheduler(0)
        killed_at = runs()
        wait_for(lambda: runs() >= killed_at + 120, 60, "ten more ticks of each after the SIGKILL")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
    for s in cq.schedules():
        if s.topic == "fast":
            cq.pause_schedule(s.name)
    ticks: dict[str, list[int]] = {}
    while batch := cq.claim("fast", 500):
        for d in batch:
            ticks.setdefault(d.message.headers["delayq-schedule"], []).append(int(d.message.headers["delayq-tick"]))
        cq.ack_many(batch)
    assert len(ticks) == 12
    for name, got in ticks.items():
        assert len(got) == len(set(got)), f"{name}: a tick published twice"
        got.sort()
        assert got == list(range(got[0], got[-1] + 1, 200)), f"{name}: a tick is missing"
    assert sum(s.missed for s in cq.schedules() if s.topic == "fast") == 0


def test_a_query_over_the_masters_answers_in_one_merged_order(cq):
    """A search over a 6-partition topic (every master holds some) merges the partitions' answers
    in due order, page after page, each match once."""
    cq.configure_topic("found", partitions=6)
    for i in range(60):
        cq.publish("found", {"n": i % 2}, delay=100 + (i * 7919) % 400)
    every = cq.page("found", "pending", limit=100).messages
    assert len({m.partition for m in every}) == 6
    want = [m.id for m in sorted((m for m in every if m.json()["n"] == 0), key=lambda m: (m.due_at, m.id))]
    found, after = [], None
    while True:
        page = cq.search("found", "pending", "payload.n:0", after=after, limit=4)
        found += [m.id for m in page.messages]
        if page.done:
            break
        after = page.next_cursor
    assert found == want and page.scanned == page.total == 60


def test_indexed_fields_live_with_their_partitions(cq):
    """An index declared on a 6-partition topic that already holds messages is built partition by
    partition (one node each call) and a query on it merges the partitions' candidates in id order."""
    cq.configure_topic("indexed", partitions=6)
    old = cq.publish_many("indexed", [{"c": i % 4} for i in range(48)])
    cq.set_indexes("indexed", ["payload.c"])
    cursor = None
    while (step := cq.build_index("indexed", cursor, count=5)).cursor:       # index
        cursor = step.cursor
    new = cq.publish_many("indexed", [{"c": 1}] * 6)
    want = sorted([i for n, i in enumerate(old) if n % 4 == 1] + new)
    found, after = [], None
    while True:
        page = cq.search("indexed", "ready", "payload.c:1", after=after, limit=4)
        found += [m.id for m in page.messages]
        if page.done:
            break
        after = page.next_cursor
    assert found == want and page.total == 18
    # The log's strings live beside their partition's keys (scripts name them: includes/index.lua),
    # and a sweep (its own calls here; the removals' otherwise) keeps what is stored.
    assert len({cq.redis.get_node_from_key(cq.keys("indexed", p).p.ixs).port for p in range(6)}) == 3
    for p in range(6):
        logs = index_log_keys(cq.keys("indexed", p).p)
        assert {cq.redis.keyslot(k) for k in logs} == {cq.redis.keyslot(cq.keys("indexed", p).p.msgs)}
    cq.cancel_many("indexed", want[:9])
    assert cq.sweep_index("indexed") >= 6
    assert sum(cq.redis.strlen(k) for p in range(6)
               for k in index_log_keys(cq.keys("indexed", p).p)[:INDEX_LANES]) // INDEX_HASH_CHARS == len(old) + len(new) - 9
    page = cq.search("indexed", "ready", "payload.c:1", limit=50)
    assert [m.id for m in page.messages] == want[9:] and page.total == 9
