import pytest

from queue_core import InvalidArgument, MessageState

from .helpers import poll, server_ms


def test_workers_heartbeat(dq):
    dq.heartbeat(["t"], "w1")
    assert dq.workers("t") == ["w1"]
    dq.heartbeat(["t"], "w1", remove=True)
    assert dq.workers("t") == []


def test_group_page_walks_one_error_group_only(dq):
    from queue_core import RetryPolicy

    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    ids = dq.publish_many("t", [str(i) for i in range(30)])
    for d in dq.claim("t", 30):
        dq.nack(d, "rare" if int(d.message.text()) % 10 == 0 else "common")
    rare = next(g for g in dq.error_groups("t") if g.sample_message == "rare")
    seen, cursor = [], None
    while True:
        page = dq.group_page("t", rare.fingerprint, limit=2, after=cursor)
        seen += [m.id for m in page.messages]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert seen == [ids[0], ids[10], ids[20]]
    assert all(m.state is MessageState.dead for m in dq.group_page("t", rare.fingerprint).messages)


def test_undocumented_keys_lists_only_strays(dq):
    dq.publish("orders", b"x")
    dq.redis.set("dq:v2:{orders}:leftover", 1)        # not in the documented layout
    dq.redis.set("dq:v2:{ghost}:g:default:ready", 1)  # a topic the registry does not know
    dq.redis.set("dq:v1:{orders}:ready", 1)           # a key of the old schema
    dq.redis.set("celery:something", 1)               # not ours: outside the prefix
    assert dq.undocumented_keys() == ["dq:v1:{orders}:ready", "dq:v2:{ghost}:g:default:ready",
                                      "dq:v2:{orders}:leftover"]


def test_per_topic_caches_are_bounded(dq):
    """Topic names arrive from URLs anyone logged in can type: 30,000 of them must not grow the
    process (the engine keeps the 4,096 most recently used)."""
    for i in range(30_000):
        dq.keys(f"typed-{i}")
    assert len(dq._keys) <= 4096
    assert dq.keys("typed-29999").p.config.endswith(":config")


def test_find_by_keys_in_one_call(dq):
    a = dq.publish("orders", "a", key="k-a")
    b = dq.publish("orders", "b", key="k-b")
    assert dq.find_by_keys("orders", ["k-a", "nope", "k-b"]) == {"k-a": a, "k-b": b}
    assert dq.find_by_key("orders", "k-b") == b and dq.find_by_key("orders", "nope") is None
    assert dq.find_by_keys("orders", []) == {}


def test_lateness_comes_from_the_histogram_claims_keep_per_minute(dq):
    """Claim lateness (claim - due, Redis clock) lands in the bucket of its upper bound; the p99 of
    the window is that bound. Nothing claimed: nothing to measure."""
    from queue_core.keys import LATENESS_BOUNDS_MS

    assert dq.lateness("t") == {"deliveries": 0, "p50_ms": None, "p99_ms": None,
                                "buckets": [0] * (len(LATENESS_BOUNDS_MS) + 1)}
    dq.publish("t", "late", delay=0.05)
    due = server_ms(dq) + 50
    poll(lambda: server_ms(dq) > due + 300)          # let it wait, due, for 300 ms before the claim
    [d] = dq.claim("t")
    late = d.claimed_ms - d.due_ms
    bound = next(b for b in LATENESS_BOUNDS_MS if late <= b)
    got = dq.lateness("t", minutes=1)
    assert late >= 250 and got["deliveries"] == 1 and got["p50_ms"] == got["p99_ms"] == bound
    assert sum(got["buckets"]) == 1
    with pytest.raises(InvalidArgument, match="between 1 and 60"):
        dq.lateness("t", minutes=0)


def test_one_claim_counts_each_message_in_its_own_bucket_in_any_order(dq):
    """A claim's messages span buckets, and come in an order whose lateness goes up and down
    (priority first, then due time): claim.lua starts each message's bucket search at the one
    before it, in both directions; every message lands in the bucket of its own lateness."""
    from queue_core.keys import LATENESS_BOUNDS_MS

    delays = [0.0, 0.4, 0.15, 0.01, 0.3, 0.05, 0.02, 0.2, 0.1, 0.0]
    start = server_ms(dq)
    for i, delay in enumerate(delays):
        dq.publish("t", str(i), delay=delay, priority=i % 3)
    poll(lambda: server_ms(dq) > start + 420)   # every one due
    ds = dq.claim("t", len(delays))
    assert len(ds) == len(delays)
    lates = [d.claimed_ms - d.due_ms for d in ds]
    assert sorted(lates) != lates and sorted(lates, reverse=True) != lates   # up and down
    want = [0] * (len(LATENESS_BOUNDS_MS) + 1)
    for late in lates:
        want[next((b for b, bound in enumerate(LATENESS_BOUNDS_MS) if late <= bound), len(LATENESS_BOUNDS_MS))] += 1
    assert len([n for n in want if n]) >= 3
    assert dq.lateness("t", minutes=2)["buckets"] == want
