"""forward_batch_callbacks (engine/batch.py): a callback its topic refuses for a passing reason
waits in the outbox and is tried again RETRY_MS later; one refused for good becomes a failed record
(test_batch.py has that case)."""

from queue_core import RetryPolicy, TopicFull
from queue_core.engine.batch import RETRY_MS

from .helpers import server_ms


def test_a_callback_its_topic_refuses_for_now_is_tried_again_later(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.configure_topic("reports", max_messages=1)
    for p in range(dq.layout("reports").partitions):   # each partition's share is full
        dq.publish("reports", "fills the budget", partition=p)
    with dq.batch("t", on_complete=("reports", "done"), group="default", partition=0) as b:
        b.publish("work")
    before = server_ms(dq)
    for d in dq.claim("t", 10):
        dq.ack(d)                                   # fires on_complete: "reports" is full (TopicFull)
    pk = dq.keys("t", 0).p
    (member, retry_at), = dq.redis.zrange(pk.batch_outbox, 0, -1, withscores=True)
    assert member.decode() == f"{b.id}|default|complete" and before + RETRY_MS <= retry_at <= server_ms(dq) + RETRY_MS
    assert dq.forward_batch_callbacks("t") == 0     # not due again yet: nothing published, nothing lost
    assert dq.batch_status("t", b.id).of("default").unsent == ("complete",)
    for group in dq.layout("reports").groups:
        for d in dq.claim("reports", 10, group=group):
            dq.ack(d)                               # room again
    dq.redis.zadd(pk.batch_outbox, {member: before}, xx=True)   # its retry time has come
    assert dq.forward_batch_callbacks("t") == 1
    (d,) = dq.claim("reports", 10)   # the default group's copy
    assert d.message.payload == b"done" and d.message.headers["delayq-batch"] == b.id
    assert dq.redis.zcard(pk.batch_outbox) == 0


def test_topic_full_is_a_passing_refusal():
    from queue_core.engine.batch import PERMANENT
    assert not issubclass(TopicFull, PERMANENT)
