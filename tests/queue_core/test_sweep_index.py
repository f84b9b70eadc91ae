"""The index log's sweep (lua/sweep_index.lua, includes/index.lua): removals count the messages
that leave and sweep the log once as many have gone as are left; sweep_index sweeps it now. A
sweep keeps every entry of a stored message (and of one held for undo: test_undo), carries along
what was appended meanwhile, and gives the memory back."""

from queue_core import MessageState

from .helpers import index_entries


def _drop(dq, topic, ids):
    """Cancel ``ids`` in every group: the last one done frees their payloads."""
    for group in dq.layout(topic).groups:
        dq.cancel_many(topic, ids, group=group)


def _found(dq, topic, query, state="pending"):
    found, after = [], None
    while True:
        page = dq.search(topic, state, query, after=after, limit=200)
        found += [m.id for m in page.messages]
        if page.done:
            return sorted(found)
        after = page.next_cursor


def _sweeping(dq, topic):
    return [p for p in range(dq.layout(topic).partitions) if dq.redis.hget(dq.keys(topic, p).p.ixs, "ls")]


def test_removals_sweep_the_log_and_queries_stay_exact(dq):
    """3,000 messages a partition, 5 of 6 cancelled in calls of 100: once as many have gone as are
    left the removals sweep, a bounded step each, and the log ends well under its size."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    parts = dq.layout("t").partitions
    ids = dq.publish_many("t", [{"c": i % 50} for i in range(3000 * parts)], delay=600)
    assert index_entries(dq, "t") == len(ids)
    _drop(dq, "t", [i for n, i in enumerate(ids) if n % 6])
    assert index_entries(dq, "t") < len(ids) * 2 // 3
    assert _found(dq, "t", "payload.c:12") == sorted(i for n, i in enumerate(ids) if n % 6 == 0 and n % 50 == 12)
    dq.sweep_index("t")
    assert index_entries(dq, "t") == len(ids[::6])          # a whole sweep leaves the stored ones, once each


def test_entries_appended_during_a_sweep_are_kept(dq):
    """A sweep under way (the removals took a few steps of it) while a publish appends to swept and
    unswept shards alike: every new entry is there after the sweep, and only what is stored."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    parts = dq.layout("t").partitions
    ids = dq.publish_many("t", [{"c": 1, "n": i} for i in range(6000 * parts)], delay=600)
    # Removals of 100 a call: the 30th starts a sweep (as many gone as left), each call checks at
    # most 2,048 entries: after the 31st it is under way.
    _drop(dq, "t", ids[:3100 * parts])
    assert _sweeping(dq, "t")
    new = dq.publish_many("t", [{"c": 2, "n": i} for i in range(500 * parts)], delay=600)
    assert _found(dq, "t", "payload.c:2") == sorted(new)
    assert dq.sweep_index("t", step=500) > 6 * parts          # bounded steps: a whole sweep of 3,400 takes 7
    assert not _sweeping(dq, "t")
    assert index_entries(dq, "t") == len(ids) - 3100 * parts + len(new)
    assert _found(dq, "t", "payload.c:2") == sorted(new)
    assert _found(dq, "t", "payload.c:1") == sorted(ids[3100 * parts:])


def test_an_empty_log_goes_and_removals_stop_counting(dq):
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    ids = dq.publish_many("t", [{"c": i % 3} for i in range(30)], delay=600)
    _drop(dq, "t", ids)
    dq.sweep_index("t")
    parts = range(dq.layout("t").partitions)
    assert index_entries(dq, "t") == 0 and not any(dq.redis.exists(dq.keys("t", p).p.ixs) for p in parts)
    # A topic whose messages have no entries (the field is absent) writes no log at all.
    dq.publish_many("t", [{"other": 1}] * 5)
    assert not any(dq.redis.exists(dq.keys("t", p).p.ixs) for p in parts)
    assert dq.counts("t")[MessageState.ready] == 5


def test_finding_a_corrupt_index_log_never_fails_a_search_and_is_swept(dq):
    """Entries that are no entry (a hand edit, a half-restored dump: bytes for a hash, an id no
    message has): a query reads past them and finds what is stored, a sweep drops them and keeps
    the entries appended after them."""
    from queue_core.keys import INDEX_LANES, index_log_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    ids = dq.publish_many("t", [{"c": 7}] * 4, delay=600)
    for p in range(dq.layout("t").partitions):
        logs = index_log_keys(dq.keys("t", p).p)
        hashes, id_log = logs[0], logs[INDEX_LANES]        # lane 0's two strings
        width = len(ids[0]) + (len(f".{p}") if p else 0)
        dq.redis.append(hashes, b"\xff\x00garb\nA" * 3)
        dq.redis.append(id_log, (b"\xff\x00" + b"Z" * width)[:width] * 3)
    ids += dq.publish_many("t", [{"c": 7}] * 4 * dq.layout("t").partitions, delay=600)
    assert _found(dq, "t", "payload.c:7") == sorted(ids)
    dq.sweep_index("t")
    assert index_entries(dq, "t") == len(ids) and _found(dq, "t", "payload.c:7") == sorted(ids)


def test_finding_an_index_log_whose_two_strings_disagree_is_walked_around_and_left_alone(dq):
    """A hand edit that leaves a lane's hashes and ids disagreeing in length (no entry can be told
    from the next): a query walks the state instead and finds what is stored; a sweep leaves that
    lane as it is rather than pair hashes with the wrong ids, and sweeps the others."""
    from queue_core.keys import INDEX_LANES, index_log_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    parts = dq.layout("t").partitions
    ids = []
    for call in range(4):      # four calls: four lanes
        ids += dq.publish_many("t", [{"c": i % 3} for i in range(call * 3 * parts, (call + 1) * 3 * parts)], delay=600)
    for p in range(parts):
        dq.redis.append(index_log_keys(dq.keys("t", p).p)[1], b"abc")      # lane 1's hashes
    want = sorted(i for n, i in enumerate(ids) if n % 3 == 1)
    page = dq.search("t", "pending", "payload.c:1", limit=500)
    assert sorted(m.id for m in page.messages) == want and page.done
    before = [dq.redis.get(k) for p in range(parts) for k in index_log_keys(dq.keys("t", p).p)[:2 * INDEX_LANES]]
    _drop(dq, "t", [i for n, i in enumerate(ids) if n % 3 == 0])
    dq.sweep_index("t")
    after = [dq.redis.get(k) for p in range(parts) for k in index_log_keys(dq.keys("t", p).p)[:2 * INDEX_LANES]]
    assert after[1::2 * INDEX_LANES] == before[1::2 * INDEX_LANES]       # the lane that disagrees: as it was
    assert index_entries(dq, "t") < len(ids)                             # (the others swept)
    assert _found(dq, "t", "payload.c:1") == want


def test_finding_a_key_debounced_all_day_does_not_grow_the_log(dq):
    """A review found every debounce appended the message's entries again, and a sweep keeps all
    of a stored message's: a key debounced with the same indexed values grew the log without end.
    A rewrite appends only entries it did not get last time; its mark leaves with the message."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.customer"])
    mid = dq.publish("t", {"customer": 7, "n": 0}, key="k", dedup="debounce", delay=60)
    for n in range(1, 30):
        assert dq.publish("t", {"customer": 7, "n": n}, key="k", dedup="debounce", delay=60).outcome == "debounced"
    assert index_entries(dq, "t") == 2                      # the publish's, and the first rewrite's
    dq.publish("t", {"customer": 8, "n": 99}, key="k", dedup="debounce", delay=60)
    assert index_entries(dq, "t") == 3
    assert _found(dq, "t", "payload.customer:8") == [mid] and _found(dq, "t", "payload.customer:7") == []
    assert any(dq.redis.hget(dq.keys("t", q).p.ixs, f"r:{mid}") for q in range(dq.layout("t").partitions))
    _drop(dq, "t", [mid])
    assert not any(dq.redis.hget(dq.keys("t", q).p.ixs, f"r:{mid}") for q in range(dq.layout("t").partitions))


def test_finding_a_long_run_of_entries_of_no_message_loses_no_entry_in_small_sweep_steps(dq):
    """300 entries of ids no message has before the real ones, swept one entry a call: every step
    goes on where the last stopped, the real entries stay and the others go."""
    from queue_core.keys import INDEX_LANES, index_log_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    for p in range(dq.layout("t").partitions):
        logs = index_log_keys(dq.keys("t", p).p)
        hashes, id_log = logs[0], logs[INDEX_LANES]        # lane 0's two strings
        dq.redis.append(hashes, b"abcdefgh" * 300)
        dq.redis.append(id_log, b"X" * (26 + (len(f".{p}") if p else 0)) * 300)
    ids = dq.publish_many("t", [{"c": 7}] * 4 * dq.layout("t").partitions, delay=600)
    assert dq.sweep_index("t", step=1) > 300
    assert _found(dq, "t", "payload.c:7") == sorted(ids) and index_entries(dq, "t") == len(ids)


def test_a_build_lists_only_the_fields_not_ready(dq):
    """A field declared next to a ready one: the build appends the new field's entries, not the
    ready one's again (the log keeps every copy)."""
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.a"])
    ids = dq.publish_many("t", [{"a": i % 5, "b": i % 7} for i in range(40)], delay=600)
    dq.set_indexes("t", ["payload.a", "payload.b"])
    cursor = None
    while (step := dq.build_index("t", cursor)).cursor:
        cursor = step.cursor
    assert index_entries(dq, "t") == 2 * len(ids)
    assert _found(dq, "t", "payload.b:3") == sorted(i for n, i in enumerate(ids) if n % 7 == 3)


def test_finding_a_sweep_call_checks_at_most_its_budget_of_entries_of_one_id(dq):
    """A review found the budget charged once per run of one id: a lane holding thousands of
    entries of one live message (a key debounced with changing values) was walked whole in one
    call. Each entry costs one: 3,000 entries at 20 a call take at least 150 calls."""
    from queue_core.keys import INDEX_LANES, index_log_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    parts = dq.layout("t").partitions
    ids = dq.publish_many("t", [{"c": 7}] * parts, delay=600)
    for msg_id in ids:
        p = int(msg_id.partition(".")[2] or 0)
        logs = index_log_keys(dq.keys("t", p).p)
        dq.redis.append(logs[5], b"abcdefgh" * 3000)
        dq.redis.append(logs[INDEX_LANES + 5], msg_id.encode() * 3000)
    assert dq.sweep_index("t", step=20) >= 150
    assert index_entries(dq, "t") == 3001 * parts and _found(dq, "t", "payload.c:7") == sorted(ids)


def test_finding_ids_without_hashes_in_a_lane_are_dropped_so_later_entries_stay_aligned(dq):
    """A review found a lane's ids left behind when its hashes were gone (a hand edit): the next
    append to that lane would pair each hash with an id too early. A sweep drops them."""
    from queue_core.keys import INDEX_LANES, index_log_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    parts = dq.layout("t").partitions
    for p in range(parts):
        dq.redis.append(index_log_keys(dq.keys("t", p).p)[INDEX_LANES + 2], b"X" * 26 * 5)   # lane 2's ids
    ids = dq.publish_many("t", [{"c": 1}] * parts, delay=600)          # lane 1
    dq.sweep_index("t")
    assert not any(dq.redis.exists(index_log_keys(dq.keys("t", p).p)[INDEX_LANES + 2]) for p in range(parts))
    ids += dq.publish_many("t", [{"c": 1}] * parts, delay=600)         # lane 2, from its start
    assert _found(dq, "t", "payload.c:1") == sorted(ids) and index_entries(dq, "t") == len(ids)


def test_finding_strings_of_the_earlier_log_format_make_the_search_walk_the_state(dq):
    """A review found a log written before the lanes (entries in "<ixs>:0".."<ixs>:7") silently
    ignored after an upgrade: messages published before it were not found by an indexed query.
    While any such string is there, a search walks the state instead, and finds them."""
    from queue_core.keys import index_legacy_keys, index_log_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    parts = dq.layout("t").partitions
    ids = dq.publish_many("t", [{"c": 3}] * (2 * parts), delay=600)
    for p in range(parts):
        pk = dq.keys("t", p).p
        dq.redis.delete(*index_log_keys(pk))                        # as if published before the lanes,
        dq.redis.set(index_legacy_keys(pk)[4], b"entries")          # whose entries were there
    assert _found(dq, "t", "payload.c:3") == sorted(ids)
    # A rebuild (every field ready) lists them in the lanes and deletes the earlier strings.
    cursor = None
    while (step := dq.build_index("t", cursor)).cursor:
        cursor = step.cursor
    assert not any(dq.redis.exists(*index_legacy_keys(dq.keys("t", p).p)) for p in range(parts))
    assert _found(dq, "t", "payload.c:3") == sorted(ids) and index_entries(dq, "t") == len(ids)


def test_finding_a_rebuild_keeps_the_earlier_format_while_messages_are_held_for_undo(dq):
    """A review found a rebuild deleting the earlier format's strings while a message held for
    undo might have its entries only there (undo lists only the fields not ready when it was
    held): with a holding area in the partition they stay, and searches keep walking the state."""
    import time

    from queue_core.keys import index_legacy_keys

    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.c"])
    ids = dq.publish_many("t", [{"c": 3}] * 2, delay=600)
    pk = dq.keys("t", 0).p
    dq.redis.set(index_legacy_keys(pk)[0], b"entries")
    dq.redis.zadd(pk.holds, {"default|42": int(time.time() * 1000) + 600_000})
    cursor = None
    while (step := dq.build_index("t", cursor)).cursor:
        cursor = step.cursor
    assert dq.redis.exists(index_legacy_keys(pk)[0])
    assert _found(dq, "t", "payload.c:3") == sorted(ids)
