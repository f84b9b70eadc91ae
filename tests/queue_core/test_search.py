"""search (lua/search.lua): the messages of one state matching a query, by a scan bounded per
script call, with an honest continuation."""

import pytest

from queue_core import InvalidArgument, MessageState, QueryError, RetryPolicy


def _ids(page):
    return [m.id for m in page.messages]


def _scan_all(dq, topic, state, query, **kw):
    """Every match, following the continuation to the end."""
    found, after = [], None
    while True:
        page = dq.search(topic, state, query, after=after, **kw)
        found += _ids(page)
        if page.done:
            assert page.next_cursor is None
            return found, page
        after = page.next_cursor


def test_payload_paths_quoted_values_numbers_lists_and_wildcards(dq):
    """Each kind of payload term matches exactly the messages the rules say."""
    a = dq.publish("t", {"customer": {"id": 42}, "note": "late fee", "tags": ["vip", "eu"]})
    b = dq.publish("t", {"customer": {"id": "42"}, "note": "late fee waived"})
    c = dq.publish("t", {"customer": {"id": 42.0}, "items": [{"sku": "A-1"}, {"sku": "B-2"}]})
    d = dq.publish("t", b"not json 42")
    e = dq.publish("t", {"customer": {"id": 420}, "note": 'caf\u00e9 "x"'})   # escapes in the raw JSON
    cases = {
        "payload.customer.id:42": {a, b, c},
        'payload.note:"late fee"': {a},
        'payload.note:"late fee*"': {a, b},
        "payload.tags:vip": {a},
        "payload.items.1.sku:B-2": {c},
        "payload.customer.id:42*": {a, b, c, e},
        'payload.note:"caf\u00e9 \\"x\\""': {e},
        "payload.customer:42": set(),          # an object never equals a value
        "payload.missing:42": set(),
    }
    for query, want in cases.items():
        found, _ = _scan_all(dq, "t", "ready", query)
        assert set(found) == want, query
        assert d not in found


def test_headers_keys_attempts_errors_and_combined_terms(dq):
    """header, key (with *), order_key, attempts comparisons and error text; terms AND together."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(3600, max_attempts=10))
    a = dq.publish("t", {"n": 1}, key="order-1", headers={"tenant": "acme"})
    b = dq.publish("t", {"n": 2}, key="order-2", headers={"tenant": "globex"}, order_key="cust-7")
    c = dq.publish("t", {"n": 3}, key="refund-3", headers={"tenant": "acme"})
    for _ in range(3):
        for d in dq.claim("t", 10):
            dq.nack(d, TimeoutError("upstream timed out") if d.id != c else ValueError("bad amount"), retry_in=0)
    assert {m.attempts for m in dq.peek("t", "retrying", limit=10)} == {3}
    dq.claim("t", 10)   # now unacked, attempt 4 in progress
    cases = {
        "header.tenant:acme": {a, c},
        "headers.tenant:acme key:order-*": {a},
        "key:order-*": {a, b},
        "order_key:cust-7": {b},
        "attempts>=4": {a, b, c},
        "attempts>4": set(),
        "attempts:4 error:timeoutERROR": {a, b},
        'error:"bad amount"': {c},
        "error:ValueError key:refund-3 header.tenant:acme": {c},
    }
    for query, want in cases.items():
        found, _ = _scan_all(dq, "t", "unacked", query)
        assert set(found) == want, query
    assert _scan_all(dq, "t", "ready", "key:order-*")[0] == []   # the other states hold nothing


def test_dead_letters_by_error_and_fingerprint_newest_first(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(1, max_attempts=1))
    ids = dq.publish_many("t", [{"i": i} for i in range(6)])
    for d in dq.claim("t", 10):
        dq.nack(d, KeyError("sku") if int(d.message.json()["i"]) % 2 else OSError("disk"))
    odd = [i for i in ids if int(dq.get("t", i).json()["i"]) % 2]
    found, page = _scan_all(dq, "t", "dead", "error:KeyError", reverse=True)
    assert set(found) == set(odd) and page.matched == 3 and page.scanned == 6 and page.total == 6
    fp = dq.get("t", odd[0]).last_error.fingerprint
    assert set(_scan_all(dq, "t", "dead", f"fingerprint:{fp}")[0]) == set(odd)
    assert dq.counts("t")[MessageState.dead] == 6   # read only


def test_a_scan_stops_at_its_budget_and_continues_where_it_stopped(dq):
    """With no time to spend, each page examines a few members, says how far it got, and the
    continuation reaches every match exactly once."""
    ids = dq.publish_many("t", [{"n": i % 10} for i in range(400)])
    want = {i for i, n in zip(ids, range(400), strict=True) if n % 10 == 7}
    found, pages, after, seen_scanned = [], 0, None, 0
    while True:
        page = dq.search("t", "ready", "payload.n:7", after=after, budget_s=0, call_budget_ms=0)
        pages += 1
        # scanned counts by score (one publish_many shares one): it never goes back; the cursor moves on
        assert page.scanned >= seen_scanned and page.total == 400 and page.next_cursor != after
        seen_scanned = page.scanned
        found += _ids(page)
        assert page.matched == len(found)
        if page.done:
            break
        after = page.next_cursor
    assert pages > 10 and sorted(found) == sorted(want) and len(found) == len(set(found))
    assert seen_scanned == 400


def test_limit_and_time_range(dq):
    now = dq.server_ms()
    early = dq.publish_many("t", [{"k": "x"}] * 5, delay=100)
    late = dq.publish_many("t", [{"k": "x"}] * 5, delay=1000)
    page = dq.search("t", "pending", "payload.k:x", limit=3)
    assert len(page.messages) == 3 and not page.done
    rest = dq.search("t", "pending", "payload.k:x", after=page.next_cursor, limit=100)
    assert set(_ids(page)) | set(_ids(rest)) == set(early + late) and rest.done
    only_late = _scan_all(dq, "t", "pending", "payload.k:x", since_ms=now + 500_000)[0]
    assert set(only_late) == set(late)
    only_early = _scan_all(dq, "t", "pending", "payload.k:x", until_ms=now + 500_000, reverse=True)[0]
    assert set(only_early) == set(early)


def test_confirm_drops_candidates_and_counts_only_what_it_keeps(dq):
    a, b = dq.publish_many("t", [{"k": "x", "secret": 1}, {"k": "x"}])
    page = dq.search("t", "ready", "payload.k:x", confirm=lambda m: "secret" not in m.json())
    assert _ids(page) == [b] and page.matched == 1


def test_bad_queries_and_cursors_are_refused(dq):
    dq.publish("t", "x")
    with pytest.raises(QueryError, match="unknown field"):
        dq.search("t", "ready", "paylod.x:1")
    with pytest.raises(QueryError, match="single word"):
        dq.search("t", "ready", "justaword")
    with pytest.raises(InvalidArgument, match="malformed search cursor"):
        dq.search("t", "ready", "payload.x:1", after="bm90IGEgY3Vyc29y")


def test_a_search_keeps_to_its_share_of_redis(dq, engine_url):
    """Between its calls a search waits, so its scripts fill at most redis_share of its time."""
    import time

    import redis

    dq.publish_many("t", [{"n": i} for i in range(3000)])
    stats = redis.Redis.from_url(engine_url)
    stats.config_resetstat()
    started = time.monotonic()
    page = dq.search("t", "ready", "payload.n:-1", budget_s=5, call_budget_ms=1, redis_share=0.25)
    wall = time.monotonic() - started
    used = stats.info("commandstats")["cmdstat_evalsha"]["usec"] / 1e6
    stats.close()
    assert page.done and page.scanned == 3000 and page.matched == 0
    assert used <= 0.25 * wall + 0.005, (used, wall)
    with pytest.raises(InvalidArgument, match="redis_share"):
        dq.search("t", "ready", "payload.n:1", redis_share=0)


def test_on_an_idle_server_a_search_takes_more_than_its_floor(dq):
    """Pacer: with Redis otherwise idle, the adaptive search scans far more in the same time than
    one held to its floor. Enough messages that the free one does not run out of them first on a
    fast machine (of 20,000 it scanned all, the held one 11,000)."""
    dq.publish_many("t", [{"n": i} for i in range(80_000)])
    held = dq.search("t", "ready", "payload.n:-1", budget_s=1.0, redis_share=0.05, adaptive=False)
    free = dq.search("t", "ready", "payload.n:-1", budget_s=1.0, redis_share=0.05)
    assert not held.done and free.scanned > 2 * held.scanned, (free.scanned, held.scanned)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_partitioned_topic_answers_in_one_merged_order(dq, reverse):
    """Several partitions walked side by side: the pages, followed to the end (also one script call
    a page), list the matches in (due, id) order over the whole topic, each once."""
    dq.configure_topic("p4", partitions=4)
    for i in range(120):     # one message per publish: each its own due time, spread over the partitions
        dq.publish("p4", {"n": i % 3}, delay=100 + (i * 7919) % 500)
    every = dq.page("p4", "pending", limit=1000).messages
    want = [m.id for m in sorted((m for m in every if m.json()["n"] == 1),
                                 key=lambda m: (m.due_at, m.id), reverse=reverse)]
    assert len(want) == 40 and len({m.partition for m in every}) > 1   # (a test shape may fix the partitions)
    for kw in ({"limit": 7}, {"limit": 5, "budget_s": 0, "call_budget_ms": 0}):
        found, page = _scan_all(dq, "p4", "pending", "payload.n:1", reverse=reverse, **kw)
        assert found == want, kw
        assert page.scanned == page.total == 120 and page.matched == 40


def test_fairness_key_and_priority_are_query_terms(dq):
    """The dispatch fields (issue 33) are terms: fairness_key with wildcards, priority compared
    as a number (a message published without one has priority 0 and no key)."""
    acme = dq.publish("t", {"n": 1}, fairness_key="acme", priority=7)
    acme_low = dq.publish("t", {"n": 2}, fairness_key="acme-eu", priority=2)
    other = dq.publish("t", {"n": 3}, fairness_key="globex")
    plain = dq.publish("t", {"n": 4})
    assert set(_scan_all(dq, "t", "ready", "fairness_key:acme")[0]) == {acme}
    assert set(_scan_all(dq, "t", "ready", "fairness_key:acme*")[0]) == {acme, acme_low}
    assert set(_scan_all(dq, "t", "ready", "priority>=5")[0]) == {acme}
    assert set(_scan_all(dq, "t", "ready", "priority:0")[0]) == {other, plain}
    assert set(_scan_all(dq, "t", "ready", "priority<7 fairness_key:acme*")[0]) == {acme_low}
    with pytest.raises(QueryError, match="whole number"):
        dq.search("t", "ready", "priority>=high")
