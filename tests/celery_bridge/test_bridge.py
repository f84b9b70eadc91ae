"""Celery's delayed tasks scheduled by delayq, with a real Celery worker, a real forwarder process
and real Redis: nothing goes to the broker before it is due, retries and revokes go through
delayq, and under a forwarder SIGKILL and a worker restart every task runs exactly once, never early."""

import importlib
import random
import signal
import sys
import time

import pytest

from queue_core import DelayQueue
from tests.celery_bridge.conftest import TOPIC, runs
from tests.conftest import wait_for


def test_delayed_tasks_wait_in_delayq_not_in_the_broker(bridge):
    module, start, q, broker = bridge
    later = module.record.apply_async(args=[1, 0], countdown=30)
    module.record.apply_async(args=[2, 0], countdown=30, task_id=later.id)   # a retried apply_async
    soon = module.record.apply_async(args=[3, 0], countdown=0.1)             # below min_delay: straight to Celery
    assert q.counts(TOPIC)["pending"] == 1 and broker.llen("celery") == 1
    [message] = q.peek(TOPIC, "pending")
    assert message.headers == {"task": "bridge.record"} and message.key == f"{later.id}:0"
    assert soon.id != later.id
    module.app.control.revoke(later.id)                                       # cancelled in delayq
    assert q.counts(TOPIC)["pending"] == 0 and q.stats(TOPIC)["cancelled"] == 1


def test_a_task_forwarded_twice_runs_once(bridge):
    """A forwarder that died after the broker took a task but before its ack in delayq forwards it
    again; the second copy is skipped by the worker (and says so)."""
    import threading

    module, start, q, broker = bridge
    module.record.apply_async(args=[5, 0], countdown=30)
    [message] = q.peek(TOPIC, "pending")
    scheduling = module.app.delayq_scheduling
    scheduling.forward(message)
    scheduling.forward(message)
    assert broker.llen("celery") == 2
    worker = start("worker")
    lines = []
    threading.Thread(target=lambda: lines.extend(iter(worker.stderr.readline, "")), daemon=True).start()
    wait_for(lambda: any("forwarded twice" in line for line in lines) and len(runs(q)) == 1, 60,
             "one copy ran and the other was skipped")
    assert [r.split("|")[0] for r in runs(q)] == ["5"]


def test_forwarded_lead_early_with_its_eta_kept(bridge):
    """A task waits in delayq until ``lead`` (0.1 s) before its due time, and goes to the broker
    with its ETA, so the Celery worker starts it on the dot; one whose ETA has passed meanwhile (a
    forwarder that was down) goes without one, to run at once."""
    import json
    from datetime import UTC, datetime

    module, start, q, broker = bridge
    scheduling = module.app.delayq_scheduling
    assert scheduling.lead == 0.1
    result = module.record.apply_async(args=[8, 0], countdown=30)
    [message] = q.peek(TOPIC, "pending")
    eta = datetime.fromisoformat(json.loads(message.payload)["headers"]["eta"])
    assert abs(message.due_at.timestamp() - (eta.timestamp() - 0.1)) < 0.002
    scheduling.forward(message)
    sent = json.loads(broker.lindex("celery", 0))
    assert sent["headers"]["id"] == result.id and datetime.fromisoformat(sent["headers"]["eta"]) == eta
    record = json.loads(message.payload)
    record["headers"]["eta"] = datetime.now(UTC).replace(year=2020).isoformat()
    q.cancel(TOPIC, message.id)
    q.publish(TOPIC, json.dumps(scheduling.sign(TOPIC, message.key, record)), key=message.key)
    [stale] = q.peek(TOPIC, "ready")
    broker.delete("celery")
    scheduling.forward(stale)
    assert json.loads(broker.lindex("celery", 0))["headers"]["eta"] is None
    with pytest.raises(ValueError, match="shorter than min_delay"):
        type(scheduling)(module.app, queue=q, min_delay=0.5, lead=0.5)


def test_forwarded_on_time_retries_through_delayq(bridge):
    module, start, q, broker = bridge
    start("worker")
    start("forwarder")
    due_ms = int((time.time() + 1) * 1000)
    module.record.apply_async(args=[7, due_ms], countdown=1)
    module.flaky.delay(9)                                    # fails twice, retrying with countdown=1
    wait_for(lambda: len(runs(q)) == 1 and len(runs(q, "bridge:flaky")) == 1, 60, "tasks ran")
    n, due, ran = runs(q)[0].split("|")
    assert n == "7" and int(ran) >= int(due)
    assert runs(q, "bridge:flaky") == ["9|2"]
    assert q.stats(TOPIC)["published"] == 3                  # the countdown task and two retries
    wait_for(lambda: sum(q.counts(TOPIC).values()) == 0, 30, "delayq drained")


@pytest.mark.slow
def test_every_task_runs_exactly_once_through_a_forwarder_kill_and_a_worker_restart(bridge):
    module, start, q, broker = bridge
    worker = start("worker")
    forwarder = start("forwarder")
    rng = random.Random(7)
    expected = {}
    for n in range(2000):
        countdown = rng.uniform(1, 20)
        expected[n] = int((time.time() + countdown) * 1000)
        module.record.apply_async(args=[n, expected[n]], countdown=countdown)
    # Every countdown task went to delayq, none straight to the broker. (The broker's list is not
    # asserted empty: on a slow machine publishing 2,000 takes over a second, and the first tasks,
    # due after 1 s, are rightly forwarded before the loop ends.)
    assert q.stats(TOPIC)["published"] == 2000
    started = time.monotonic()
    wait_for(lambda: len(runs(q)) >= 300, 60, "a first share ran")
    forwarder.send_signal(signal.SIGKILL)                    # leases it held come back after 30 s
    forwarder.wait(10)
    start("forwarder")
    wait_for(lambda: len(runs(q)) >= 900, 60, "more ran")
    worker.send_signal(signal.SIGTERM)                       # warm restart: prefetched tasks go back
    worker.wait(60)
    start("worker")
    wait_for(lambda: sum(q.counts(TOPIC).values()) == 0 and broker.llen("celery") == 0
             and len(runs(q)) >= 2000, 180, "every task forwarded and run")
    records = [r.split("|") for r in runs(q)]
    counts = {}
    for n, due, ran in records:
        counts[int(n)] = counts.get(int(n), 0) + 1
        assert int(ran) >= int(due), f"task {n} ran {int(due) - int(ran)} ms early"
    assert counts == dict.fromkeys(expected, 1), {n: c for n, c in counts.items() if c != 1}
    assert time.monotonic() - started < 170


def test_a_broker_outage_nacks_the_task_and_loses_nothing(redis_url, monkeypatch):
    """The forwarder cannot reach the broker: the task is nacked and waits for its next attempt by
    the topic's policy (retrying, with the broker's error), never dropped nor dead-lettered."""
    import threading

    monkeypatch.setenv("BRIDGE_BROKER_URL", "redis://127.0.0.1:1/1")   # nothing listens there
    monkeypatch.setenv("BRIDGE_DELAYQ_URL", redis_url)
    sys.modules.pop("tests.celery_bridge.app", None)
    module = importlib.import_module("tests.celery_bridge.app")
    try:
        q = DelayQueue.from_url(redis_url)
        module.record.apply_async(args=[11, 0], countdown=30)        # scheduling needs no broker
        [waiting] = q.peek(TOPIC, "pending")
        worker = module.app.delayq_scheduling.forwarder(concurrency=1, name="outage-forwarder")
        q.deliver_now(TOPIC, waiting.id)
        runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
        runner.start()
        try:
            wait_for(lambda: q.counts(TOPIC)["retrying"] == 1, 30, "the forward failed and was nacked")
        finally:
            worker.stop()
            runner.join(30)
        message = q.get(TOPIC, waiting.id)
        assert message.attempts == 1 and message.last_error is not None
        assert message.last_error.type == "OperationalError" and "127.0.0.1:1" in message.last_error.message
        assert q.counts(TOPIC)["dead"] == 0
    finally:
        sys.modules.pop("tests.celery_bridge.app", None)
