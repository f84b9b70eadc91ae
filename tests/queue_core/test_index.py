"""Indexed fields (issue 36 point 3): set_indexes, indexes, build_index (lua/index.lua), the
entries publish.lua, replay_edited.lua and schedule ticks write and leave.lua removes, and the
search that reads an equality term's candidates from the index."""

import hashlib

import pytest

from queue_core import InvalidArgument, MessageState, QueueError

from .helpers import index_entries


def _all(dq, topic, state, query, **kw):
    found, after = [], None
    while True:
        page = dq.search(topic, state, query, after=after, **kw)
        found += [m.id for m in page.messages]
        if page.done:
            return found, page
        after = page.next_cursor


_entries = index_entries


def test_an_index_answers_an_equality_term_with_its_candidates(dq):
    """Declared on an empty topic it is ready at once; a query on it reads the candidates (total
    is the candidates, not the state), in id order both ways, and equals a scan's answer."""
    dq.configure_topic("t")
    assert [(i.field, i.ready) for i in dq.set_indexes("t", ["payload.customer.id", "header.tenant"])] == [
        ("payload.customer.id", True), ("header.tenant", True)]
    ids = dq.publish_many("t", [{"customer": {"id": i % 40}, "n": i} for i in range(400)], headers={"tenant": "acme"})
    want = sorted(i for n, i in enumerate(ids) if n % 40 == 7)
    found, page = _all(dq, "t", "ready", "payload.customer.id:7", limit=3)
    assert found == want and page.total == 10 and page.scanned == 10 and page.matched == 10
    assert _all(dq, "t", "ready", "payload.customer.id:7.0", reverse=True)[0] == want[::-1]   # numbers as numbers
    both = _all(dq, "t", "ready", "header.tenant:acme payload.n:47")[0]
    assert both == [ids[47]]
    scan = _all(dq, "t", "ready", "payload.customer.id:7 payload.n:*7")[0]    # the index narrows, the terms decide
    assert sorted(scan) == sorted(i for n, i in enumerate(ids) if n % 40 == 7 and str(n).endswith("7"))
    assert _all(dq, "t", "dead", "payload.customer.id:7")[0] == []            # candidates of another state


def test_entries_follow_the_message_and_nothing_is_left_behind(dq):
    """Entries come with publish (not for a key's existing message), change with an edited
    replay, and leave once the messages are gone and the log is swept (the removals sweep by
    themselves once as many have gone as are left, or none is left: test_sweep_index)."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.k", "payload.tags"])
    a = dq.publish("t", {"k": "x", "tags": ["red", "blue", "red"]}, key="one")
    assert dq.publish("t", {"k": "y"}, key="one") == a          # the key's message: no new entries
    assert _all(dq, "t", "ready", "payload.k:y")[0] == []
    assert _all(dq, "t", "ready", "payload.tags:blue")[0] == [a]
    [d] = dq.claim("t", 1)
    dq.nack(d, "boom")
    dq.kill("t", a)
    dead = dq.get("t", a)
    assert dead.state.value == "dead"
    sha = hashlib.sha1(dead.payload).hexdigest()
    b = dq.replay_edited("t", a, {"k": "z"}, sha)
    assert _all(dq, "t", "ready", "payload.k:z")[0] == [b]
    assert _all(dq, "t", "ready", "payload.tags:blue")[0] == []
    for group in dq.layout("t").groups:      # every group done: the last one frees the messages
        while batch := dq.claim("t", 10, group=group):
            dq.ack_many(batch)
    # The removal that left a partition empty swept its log (a larger one: a step a removal, and
    # sweep_index finishes it; test_sweep_index).
    assert _entries(dq, "t") == 0 and not any(dq.redis.exists(dq.keys("t", p).p.ixs)
                                              for p in range(dq.layout("t").partitions))


def test_an_index_declared_on_a_topic_with_messages_is_built_first(dq):
    """Until build_index has walked the messages the field is not ready and queries scan; the
    build goes step by step with a cursor and then the index answers for old and new messages."""
    dq.configure_topic("t")
    old = dq.publish_many("t", [{"c": i % 5} for i in range(60)])
    [ix] = dq.set_indexes("t", ["payload.c"])
    assert not ix.ready
    page = dq.search("t", "ready", "payload.c:3", limit=100)
    assert page.total == 60 and len(page.messages) == 12                      # a scan of the state
    steps, cursor = 0, None
    while True:
        step = dq.build_index("t", cursor, count=7)
        steps += 1
        cursor = step.cursor
        if cursor is None:
            break
    assert steps > 3 and [i.ready for i in dq.indexes("t")] == [True]
    new = dq.publish("t", {"c": 3})
    found, page = _all(dq, "t", "ready", "payload.c:3")
    assert sorted(found) == sorted([i for n, i in enumerate(old) if n % 5 == 3] + [new]) and page.total == 13


def test_a_changed_declaration_refuses_stale_work(dq, engine_url):
    """A publisher that cached the old declaration is refused by the script and publishes again
    with the new one (no message left out of an index); a build whose declaration changed midway
    stops saying so; a field left out is no longer used."""
    from queue_core import DelayQueue

    dq.configure_topic("t")
    other = DelayQueue.from_url(engine_url)
    other.publish("t", {"c": 1})                   # caches the layout: no indexed field
    dq.set_indexes("t", ["payload.c"])
    mid = other.publish("t", {"c": 2})
    assert _all(dq, "t", "ready", "payload.c:2")[0] == [mid]
    dq.set_indexes("t", ["payload.c", "payload.d"])
    step = dq.build_index("t", None, count=1)
    dq.set_indexes("t", ["payload.c"])
    if step.cursor:
        with pytest.raises(QueueError, match="changed during the build"):
            dq.build_index("t", step.cursor)
    assert [i.field for i in dq.indexes("t")] == ["payload.c"]
    other.redis.close()


def test_schedule_ticks_are_indexed(dq):
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.report", "header.delayq-schedule"])
    dq.upsert_schedule("nightly", topic="t", every=3600, payload={"report": "sales"})
    mid = dq.run_schedule_now("nightly")
    assert _all(dq, "t", "ready", "payload.report:sales")[0] == [mid]
    assert _all(dq, "t", "ready", "header.delayq-schedule:nightly")[0] == [mid]


def test_finding_a_ticks_header_number_is_indexed_as_the_tick_stores_it(dq):
    """schedule_tick.lua writes a tick's headers through cjson (14 significant digits): its
    entries are computed from those numbers, so an index finds what a scan finds."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["header.v"])
    dq.upsert_schedule("odd", topic="t", every=3600, payload={}, headers={"v": 0.1 + 0.2, "w": 2 ** 60})
    mid = dq.run_schedule_now("odd")
    dq.set_indexes("t", ["header.v", "header.w"])
    cursor = None
    while (step := dq.build_index("t", cursor)).cursor:
        cursor = step.cursor
    for query in ("header.v:0.3", f"header.w:{float(format(2 ** 60, '.14g')):.0f}"):
        assert _all(dq, "t", "ready", query)[0] == [mid], query


def test_bad_declarations_say_what_is_wrong(dq):
    dq.configure_topic("t")
    with pytest.raises(InvalidArgument, match="at most 4"):
        dq.set_indexes("t", [f"payload.f{i}" for i in range(5)])
    with pytest.raises(InvalidArgument, match="payload.<path> or header.<name>"):
        dq.set_indexes("t", ["attempts"])
    with pytest.raises(InvalidArgument, match="set by each schedule tick"):
        dq.set_indexes("t", ["header.delayq-tick"])
    with pytest.raises(InvalidArgument, match="does not exist"):
        dq.set_indexes("nope", ["payload.a"])
    with pytest.raises(InvalidArgument, match="declares no indexed field"):
        dq.build_index("t")


def test_a_debounced_message_is_found_by_its_new_payload(dq):
    """debounce gives the key's unstarted message the new payload and keeps its headers: the
    payload field's entries follow the new payload, the header field's stay."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.step", "header.tenant"])
    mid = dq.publish("t", {"step": "one"}, key="k", dedup="debounce", headers={"tenant": "acme"}, delay=60)
    again = dq.publish("t", {"step": "two"}, key="k", dedup="debounce", headers={"tenant": "other"}, delay=60)
    assert again == mid and again.outcome == "debounced"
    assert _all(dq, "t", "pending", "payload.step:two")[0] == [mid]
    assert _all(dq, "t", "pending", "payload.step:one")[0] == []
    assert _all(dq, "t", "pending", "header.tenant:acme")[0] == [mid]


def test_finding_a_publish_racing_set_indexes_is_never_left_out_of_a_ready_index(engine_url):
    """A review found set_indexes checked the topic empty, then wrote the declaration: a publisher
    with the old one got a message in between with no entries, and the field was marked ready.
    The declaration is written first (a stale publisher is refused from then on), then checked."""
    from queue_core import DelayQueue

    q, other = DelayQueue.from_url(engine_url), DelayQueue.from_url(engine_url)
    q.configure_topic("t")
    other.layout("t")                                   # caches the declaration: none
    holds = q._holds_messages
    raced = []

    def racing(topic, layout):
        raced.append(other.publish("t", {"c": 5}))      # sent with the old declaration
        return (yield from holds(topic, layout))
    q._holds_messages = racing
    [ix] = q.set_indexes("t", ["payload.c"])
    if ix.ready:
        assert _all(q, "t", "ready", "payload.c:5")[0] == raced
    else:
        assert raced and q.counts("t")[MessageState.ready] == 1
    q.redis.close()
    other.redis.close()


def _build_while_debouncing(dq, engine_url, monkeypatch):
    """Run build_index on topic "t" to its end, debouncing key "k" to {"c": "new"} between the
    build's first read of a record and its script call."""
    import queue_core.engine.index as index_module
    from queue_core import DelayQueue

    writer = DelayQueue.from_url(engine_url)          # a blocking client: the hook may run in dq's loop
    real, done = index_module.record_entries, []

    def debounced_meanwhile(fields, record, payload=None):
        if not done:
            done.append(True)
            assert writer.publish("t", {"c": "new"}, key="k", dedup="debounce", delay=60).outcome == "debounced"
        return real(fields, record, payload)
    monkeypatch.setattr(index_module, "record_entries", debounced_meanwhile)
    cursor = None
    while (step := dq.build_index("t", cursor)).cursor:
        cursor = step.cursor
    assert done
    writer.redis.close()


def test_finding_a_build_never_writes_back_the_entries_of_a_rewritten_record(dq, engine_url, monkeypatch):
    """A review found build_index could read a record, a debounce rewrite it (with its new
    entries), and the build then put the old payload's entries back. The build sends each
    record's digest; the script skips a record that changed."""
    dq.configure_topic("t")
    mid = dq.publish("t", {"c": "old"}, key="k", dedup="debounce", delay=60)
    dq.set_indexes("t", ["payload.c"])
    _build_while_debouncing(dq, engine_url, monkeypatch)
    assert _all(dq, "t", "pending", "payload.c:new")[0] == [mid]
    assert _all(dq, "t", "pending", "payload.c:old")[0] == []


def test_finding_payloads_and_headers_are_indexed_as_the_scripts_read_them(dq):
    """A review found a payload with bytes that are not UTF-8, or a 400-digit integer, crashed the
    publish or left the message out, and headers were indexed from the caller's dict (a tuple, an
    int key) rather than as stored."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.a", "header.t"])
    odd = dq.publish("t", b'{"a": "x", "b": "caf\xe9"}')
    big = dq.publish("t", '{"a": "y", "n": ' + "9" * 400 + "}")
    tup = dq.publish("t", {"a": "z"}, headers={"t": ("acme", "b")})
    assert _all(dq, "t", "ready", "payload.a:x")[0] == [odd]
    assert _all(dq, "t", "ready", "payload.a:y")[0] == [big]
    assert _all(dq, "t", "ready", "header.t:acme")[0] == [tup]


def test_finding_a_number_too_large_for_a_double_is_found_by_a_scan(dq):
    """A review found payload.a:1e400 read the index, where a stored 1e400 (a double: infinite) has
    no entry, so the query missed it; such a term now scans the state."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.a"])
    huge = dq.publish("t", '{"a": 1e400}')
    text = dq.publish("t", {"a": "1e400"})
    assert sorted(_all(dq, "t", "ready", "payload.a:1e400")[0]) == sorted([huge, text])


def test_finding_a_debounce_during_a_build_keeps_the_header_fields_entries(dq, engine_url, monkeypatch):
    """A review found a debounce between the build's read of a record and its script call lost the
    header fields being built: the digest no longer matched, so the record was skipped, and the
    debounce had written only payload entries. Headers never change: they are listed anyway."""
    dq.configure_topic("t")
    mid = dq.publish("t", {"c": "old"}, key="k", dedup="debounce", delay=60, headers={"tenant": "acme"})
    dq.set_indexes("t", ["header.tenant", "payload.c"])
    _build_while_debouncing(dq, engine_url, monkeypatch)
    assert [i.ready for i in dq.indexes("t")] == [True, True]
    assert _all(dq, "t", "pending", "header.tenant:acme")[0] == [mid]
    assert _all(dq, "t", "pending", "payload.c:new")[0] == [mid]
    assert _all(dq, "t", "pending", "payload.c:old")[0] == []


def test_finding_a_message_with_too_many_index_entries_is_refused_whole(dq):
    """A review found a payload whose indexed field is a list of ~140,000 values wrote as many
    sorted-set members in one script call (Redis held for about a second). A message may have at
    most MAX_ENTRIES entries; a call holding one with more is refused before anything is written."""
    from queue_core.indexes import MAX_ENTRIES

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.tags"])
    ok = dq.publish("t", {"tags": list(range(MAX_ENTRIES))})
    with pytest.raises(InvalidArgument, match=f"at most {MAX_ENTRIES}"):
        dq.publish_many("t", [{"tags": [1]}] * 300 + [{"tags": list(range(MAX_ENTRIES + 1))}])
    assert dq.counts("t")[MessageState.ready] == 1 and _entries(dq, "t") == MAX_ENTRIES
    assert _all(dq, "t", "ready", f"payload.tags:{MAX_ENTRIES - 1}")[0] == [ok]


def test_finding_a_schedule_payload_with_too_many_index_entries(dq):
    """Each tick writes its payload's index entries: a schedule whose payload has more than
    MAX_ENTRIES is refused when written; one written before its topic declared the field ticks
    with its first MAX_ENTRIES entries (the publish's cap holds either way)."""
    from queue_core.indexes import MAX_ENTRIES

    dq.configure_topic("t")
    dq.upsert_schedule("early", topic="t", every=3600, payload={"tags": list(range(MAX_ENTRIES + 50))})
    dq.set_indexes("t", ["payload.tags"])
    with pytest.raises(InvalidArgument, match=f"at most {MAX_ENTRIES}"):
        dq.upsert_schedule("nightly", topic="t", every=3600, payload={"tags": list(range(MAX_ENTRIES + 1))})
    assert [s.name for s in dq.schedules()] == ["early"]
    mid = dq.run_schedule_now("early")
    assert _entries(dq, "t") == MAX_ENTRIES
    assert _all(dq, "t", "ready", "payload.tags:0")[0] == [mid]


def test_finding_a_build_lists_at_most_the_cap_of_one_older_record(dq):
    """A record stored before its field was declared may hold any number of values: the build
    lists its first MAX_ENTRIES, as a publish would have refused more, and the step says so."""
    from queue_core.indexes import MAX_ENTRIES

    dq.configure_topic("t")
    mid = dq.publish("t", {"tags": list(range(MAX_ENTRIES * 4))})
    dq.set_indexes("t", ["payload.tags"])
    cursor, capped = None, 0
    while True:
        step = dq.build_index("t", cursor)
        capped += step.capped
        if not (cursor := step.cursor):
            break
    assert _entries(dq, "t") == MAX_ENTRIES and capped == 1
    assert _all(dq, "t", "ready", "payload.tags:0")[0] == [mid]


def test_a_log_read_in_many_pieces_and_a_value_too_common_for_the_index(dq, monkeypatch):
    """The search reads the log's hashes in pieces (1 MiB; 64 bytes here, so pieces cut hashes)
    and finds the same; a value with more candidates than the index hands out is searched by
    walking the state, with the same answer, and a cursor of the index's walk then asks for a new
    search instead of skipping or repeating matches."""
    from queue_core.engine import find, index

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    ids = dq.publish_many("t", [{"c": i % 3} for i in range(90)])
    want = sorted(i for n, i in enumerate(ids) if n % 3 == 1)
    monkeypatch.setattr(index, "INDEX_READ_PIECE", 60)     # (not a multiple of a hash's 8 letters)
    assert _all(dq, "t", "ready", "payload.c:1")[0] == want
    first = dq.search("t", "ready", "payload.c:1", limit=5)
    monkeypatch.setattr(find, "INDEX_CANDIDATES_MOST", 5)
    found, page = _all(dq, "t", "ready", "payload.c:1", limit=7)
    assert sorted(found) == want and page.total == 90        # a walk of the state: total is the state
    with pytest.raises(InvalidArgument, match="start it again"):
        dq.search("t", "ready", "payload.c:1", after=first.next_cursor)


def test_finding_a_malformed_build_cursor_is_refused_clearly(dq):
    """A cursor comes back from a client (the dashboard keeps it in the operation): anything but
    one build_index gave is an InvalidArgument naming it, never a Redis error (review finding: an
    HSCAN cursor past 2**64 reached Redis)."""
    import zlib

    from queue_core import InvalidArgument

    dq.configure_topic("t")
    dq.publish_many("t", [{"c": i} for i in range(5)])
    dq.set_indexes("t", ["payload.c"])
    spec = f"{zlib.crc32(dq.redis.hget(dq.keys('t').config, 'indexes')):08x}"
    for bad in ("x", "0:1", f"0:{2 ** 64}:{spec}", f"0:-1:{spec}", f"9999:0:{spec}", f"0:1.5:{spec}"):
        with pytest.raises(InvalidArgument, match="cursor"):
            dq.build_index("t", bad)
    step = dq.build_index("t", f"0:0:{spec}")                   # a well-formed one works
    assert step.listed >= 0


def test_held_messages_are_listed_in_calls_of_bounded_entries():
    """Undo's listing of held messages (engine/index.py _index_held) sends index.lua at most
    LIST_ENTRIES entries a call, never splitting a message (review finding: one call of 1,000
    messages with 256 entries each held Redis ~350 ms)."""
    from queue_core.engine.index import LIST_ENTRIES, _by_entries

    ids = [f"m{i}" for i in range(30)]
    hashes = ["abcdefgh" * (256 if i % 3 else 1) for i in range(30)]     # (a message's Hashes)
    pieces = _by_entries(ids, hashes)
    assert [i for piece in pieces for i in piece[0]] == ids
    assert all(sum(len(h) // 8 for h in piece[1]) <= LIST_ENTRIES for piece in pieces)
    # As full as they may be: a piece and the next message's entries would be too many.
    assert all(sum(len(h) // 8 for h in piece[1]) + len(pieces[n + 1][1][0]) // 8 > LIST_ENTRIES
               for n, piece in enumerate(pieces[:-1]))
    assert _by_entries([], []) == []
