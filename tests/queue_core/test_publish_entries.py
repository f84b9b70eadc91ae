"""queue_core.publish_entries: the entries a publish computes for a call of messages from the
objects they were serialised from are those of the JSON each is stored as (queue_core.indexes
says what those are), cached or not, a value at a time or a list at a time."""

import pytest

from queue_core import InvalidArgument


class _Tag(str):
    """A str subclass: json.dumps writes its text, but it is not a plain JSON type."""


@pytest.mark.parametrize("payload", [
    {"a": {"b": 42}, "n": 1},
    {"a": {"b": [1, 1.0, "1", True, None, "x", [2], {"c": 3}, 2 ** 60, float("nan")]}},
    {"a": {"b": 7, 1: "int key"}},                    # a non-text key elsewhere in the object
    {"a": {"1": "text", 1: "int"}, "b": 0},           # json.dumps writes both as "1": the last one wins
    {"a": {1: "only an int key"}},                    # found as "1" in the JSON
    {"a": ({"b": 5},)},                               # a tuple is a list in the JSON
    {"a": {"b": _Tag("tagged")}},
    {"a": {"b": 1e300 * 10}},                         # inf: not indexed either way
    [{"b": 3}, {"b": 4}],
    {"a": {"b": "x" * 300}},                          # longer than any query value
])
def test_finding_entries_read_from_the_published_object_equal_those_of_its_json(payload):
    """publish reads a dict's entries from the object instead of parsing the JSON it wrote
    (publish_entries._plain_at): wherever the two could differ (non-text keys, tuples, str subclasses)
    it parses, so the entries are always the JSON's."""
    from queue_core.engine.base import to_bytes
    from queue_core.indexes import entries_text, hashes_of
    from queue_core.publish_entries import hashed_entries, message_hashes

    raw = to_bytes(payload)
    # The second declaration has no segment json.dumps could write for a non-text key: a publish
    # walks it without a call per message (hashed_entries' quick loop).
    for fields in (((1, "payload.a.b"), (3, "payload.a.1"), (4, "payload.0.b"), (5, "header.t")),
                   ((1, "payload.a.b"), (5, "header.t"))):
        want = hashes_of(entries_text(fields, raw, {"t": "x"}))
        assert message_hashes(fields, raw, {"t": "x"}, payload) == message_hashes(fields, raw, {"t": "x"}) == want
        assert hashed_entries("t", fields, [raw], [0], {"t": "x"}, [payload])[0] == want


def _each(hashes: str) -> list[str]:
    """A message's hashes (publish_entries.Hashes), each on its own, sorted."""
    assert len(hashes) % 8 == 0
    return sorted(hashes[k:k + 8] for k in range(0, len(hashes), 8))


def test_hashed_entries_of_some_messages_of_a_call():
    """A publish retried after a stale layout computes the entries of the refused messages alone:
    each at its own place, None at the others; the general way and the quick one agree."""
    from queue_core.engine.base import to_bytes
    from queue_core.indexes import entries_text, hashes_of
    from queue_core.publish_entries import hashed_entries

    fields = ((1, "payload.a.b"),)
    payloads = [{"a": {"b": 1}}, {"a": [{"b": 2}]}, {"a": {"c": 3}}, {"a": {"b": "x"}}]
    raws = [to_bytes(p) for p in payloads]
    out = hashed_entries("t", fields, raws, [1, 3], None, payloads)
    assert out[0] is None and out[2] is None
    assert out[1] == hashes_of(entries_text(fields, raws[1], None)) == ""        # a list on the way
    assert out[3] == hashes_of(entries_text(fields, raws[3], None)) != ""
    every = hashed_entries("t", fields, raws, range(4), None, payloads)
    assert list(every) == [hashes_of(entries_text(fields, r, None)) for r in raws]


def test_a_call_of_values_not_cached_is_hashed_as_each_value_alone():
    """A field of unique values (an order id) is hashed a call's column at a time (_fresh_many):
    for lists of ints, of text, and of those mixed with what the column way must leave to the
    value's own (a number-like text, a bool, a float, None, a NUL, a long text, text that is not
    valid UTF-8), every entry is the one the message's JSON gives, cached or not."""
    import json
    import uuid

    from queue_core.indexes import entries_text, hashes_of
    from queue_core.publish_entries import _clear_caches, hashed_entries

    fields = ((3, "payload.order"),)
    columns = [
        [10 ** 6 + i for i in range(300)] + [-5, 0, 10 ** 15 - 1, -(10 ** 15) + 1],
        [10 ** 15 + i for i in range(20)] + [2 ** 60, -(10 ** 16)],   # past an exact double's: 1e+15
        [f"ORD-{i}-é" for i in range(300)] + ["", "x" * 200, "ok", "😀"],
        [f"ORD-{i}" for i in range(50)] + ["4.2e1", "-0"],   # these read as numbers: "42", "0"
        ["4.2e1"] + [f"ORD-{i}" for i in range(50)],         # the first one too
        [f"ORD-{i}" for i in range(50)] + ["-x", "0x1", "12345678901234567890"],
        [str(uuid.UUID(int=i * 7919 << 64)) for i in range(50)],   # some start with a digit
        [str(10 ** 9 + i) for i in range(50)] + ["0", "007", "-5", "10.0", "1e3", "123456789012345",
                                                "1234567890123456", "١٢"],   # text order numbers
        [f"ORD-{i}" for i in range(50)] + ["bad\udcff"],   # not valid text: not indexed
        [f"ORD-{i}" for i in range(50)] + ["a\0b"],
        [f"ORD-{i}" for i in range(50)] + ["x" * 201],
        [10 ** 7 + i for i in range(50)] + [True, 1.5, 10 ** 15, None, "7", "ORD"],
    ]
    for values in columns:
        payloads = [{"order": v} for v in values]
        raws = [json.dumps(p).encode() for p in payloads]   # (a lone surrogate as \\udcff)
        want = [hashes_of(entries_text(fields, r, None)) for r in raws]
        assert sum(1 for w in want if w) >= len(values) - 2    # (entries to compare: not all none)
        for clear in (True, False, False):                    # not cached, seen once, cached
            if clear:
                _clear_caches()
            got = hashed_entries("t", fields, raws, range(len(raws)), None, payloads)
            assert list(got) == want, values[-1]


def test_a_call_of_unique_values_leaves_the_caches_bounded():
    """Values are cached once seen in an earlier call, not at first sight (a field of unique
    values would fill the cache with values never asked for again), and neither the cache nor
    the values seen grows past _HASHED_MOST, whatever the size of one call."""
    from queue_core.publish_entries import _HASHED, _HASHED_MOST, _SEEN, _clear_caches, hashed_entries

    _clear_caches()
    fields = ((3, "payload.order"),)
    payloads = [{"order": 10 ** 9 + i} for i in range(100)]
    hashed_entries("t", fields, [b"x"] * 100, range(100), None, payloads)
    assert not _HASHED.get(("3", int))
    hashed_entries("t", fields, [b"x"] * 100, range(100), None, payloads)
    assert len(_HASHED[("3", int)]) == 100
    many = [{"order": 10 ** 10 + i} for i in range(_HASHED_MOST + 3000)]
    for _ in range(2):
        hashed_entries("t", fields, [b"x"] * len(many), range(len(many)), None, many)
        assert len(_HASHED[("3", int)]) <= _HASHED_MOST and len(_SEEN[("3", int)]) <= _HASHED_MOST
    assert len(_HASHED[("3", int)]) > _HASHED_MOST // 2


def test_the_entries_a_publish_reads_from_its_objects_are_those_of_their_json():
    """Property (hypothesis): for payloads of every shape a publish meets (nested dicts and lists,
    tuples, dict and str subclasses, keys that are not text, numbers at the edge of a double,
    NaN), hashed_entries from the objects equals the entries of the JSON each is stored as, in
    any order; the objects are not changed; too many entries are refused."""
    import collections
    import copy

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from queue_core.engine.base import to_bytes
    from queue_core.errors import PayloadNotSerializable
    from queue_core.indexes import MAX_ENTRIES, entries_text, hashes_of
    from queue_core.publish_entries import _clear_caches, hashed_entries

    class Text(str):
        pass

    keys = st.sampled_from(["a", "b", "0", "1", "x"]) | st.sampled_from([1, 1.0, True, None, -0.0])
    scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
               | st.sampled_from([10 ** 15, 2 ** 53 + 1, 1e15, 0.1 + 0.2, "42", "4.2e1", "x" * 201, "a\0b", "é"])
               | st.text(max_size=4) | st.text(max_size=3).map(Text))
    plain = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                         | st.dictionaries(keys, inner, max_size=4), max_leaves=10)
    payloads = plain | st.builds(lambda v: collections.OrderedDict(a={"b": v}), plain) | st.builds(
        lambda n: {"a": {"b": list(range(n))}}, st.integers(MAX_ENTRIES - 1, MAX_ENTRIES + 1))
    paths = st.lists(st.sampled_from(["payload.a", "payload.a.b", "payload.0", "payload.a.1", "payload.b.x",
                                      "header.t"]), min_size=1, max_size=4, unique=True)

    # A call's column of scalars, as a field of unique values gives (the list way of _fresh_many)
    texts = st.text(max_size=4) | st.sampled_from(["42", "4.2e1", "-0", "-x", "a\0b", "x" * 201, "é", "007",
                                                   "999999999999999", "1000000000000000", "0"])
    columns = (st.lists(scalars, min_size=2, max_size=20) | st.lists(texts, min_size=2, max_size=20)
               | st.lists(st.integers(-(10 ** 16), 10 ** 16), min_size=2, max_size=20)).map(
        lambda values: [{"a": {"b": v}} for v in values])

    calls = st.tuples(st.lists(payloads, min_size=1, max_size=4), paths) | st.tuples(
        columns, st.sampled_from([["payload.a.b"], ["payload.a.b", "header.t"], ["payload.b.x", "payload.a.b"]]))

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(calls, st.none() | st.fixed_dictionaries({"t": scalars | st.lists(scalars, max_size=5)}), st.booleans())
    def check(call, headers, forget):
        objects, names = call
        if forget:
            _clear_caches()
        fields = tuple(enumerate(names, 1))
        try:
            raws = [to_bytes(o) for o in objects]
        except PayloadNotSerializable:
            return
        before = copy.deepcopy(objects)
        want = [_each(hashes_of(entries_text(fields, r, headers))) for r in raws]
        if any(len(w) > MAX_ENTRIES for w in want):
            with pytest.raises(InvalidArgument, match="at most"):
                hashed_entries("t", fields, raws, range(len(raws)), headers, objects)
        else:
            got = hashed_entries("t", fields, raws, range(len(raws)), headers, objects)
            assert [_each(g) for g in got] == want
        assert repr(objects) == repr(before)

    check()


def _pairs(hashes: str, ids: str) -> list[tuple[str, str]]:
    """(hash, id) of each entry of the log's two strings (includes/index.lua)."""
    n = len(hashes) // 8
    assert len(hashes) == 8 * n and (n == 0) == (ids == "") and len(ids) % max(n, 1) == 0
    width = len(ids) // n if n else 0
    return [(hashes[8 * k:8 * k + 8], ids[width * k:width * k + width]) for k in range(n)]


def _arg_entries(args: list) -> list[tuple[str, str]]:
    """The entries of entries_args' arguments, as publish.lua reads them."""
    if args == [""]:
        return []
    assert args[0] == "@" and len(args) == 3 and args[1]
    return _pairs(args[1], args[2])


def _blob_entries(blob: str) -> list[tuple[str, str]]:
    """The same of an entries_blob (lua/includes/index.lua index_pair)."""
    if blob == "":
        return []
    hashes, ids = blob.split(":")
    return _pairs(hashes, ids)


@pytest.mark.parametrize("values", [
    [10 ** 6 + i for i in range(600)],             # unique ints, hashed a call at a time
    [f"ORD-{i}" for i in range(300)],              # unique text
    [7],                                            # one message: publish()
    [i % 3 for i in range(50)],                     # repeated: cached after the first call
    [1, "x", None, 2.5, True, [4, 5], {"a": 1}],    # each its own way, some with no entry
    [[1, 2, 3]],                                    # one message, several entries
])
def test_entries_args_write_what_entries_blob_writes(values):
    """A publish passes its entries' hashes and ids as two arguments (entries_args), which
    publish.lua appends as they are; they are the entries entries_blob writes for the same
    messages (the blob other scripts take), each message's hashes with its id, whatever the call
    holds."""
    from queue_core.engine.base import to_bytes
    from queue_core.ids import new_ids
    from queue_core.indexes import entries_args, entries_blob
    from queue_core.keys import id_for_partition
    from queue_core.publish_entries import _clear_caches, hashed_entries

    _clear_caches()
    fields = ((2, "payload.v"),)
    objects = [{"v": v} for v in values]
    raws = [to_bytes(o) for o in objects]
    for partition in (0, 12, 0):   # the last call meets every value again
        hashes = hashed_entries("t", fields, raws, range(len(raws)), None, objects)
        ids = [id_for_partition(i, partition) for i in new_ids(len(raws))]
        entries = _arg_entries(entries_args(ids, hashes))
        assert entries == _blob_entries(entries_blob(ids, hashes))
        assert entries == [(found[k:k + 8], i) for i, found in zip(ids, hashes, strict=True)
                           for k in range(0, len(found), 8)]
        assert len(entries) * 8 == sum(map(len, hashes))


def test_entries_args_of_no_entries():
    """No entries: one empty argument, as a topic with no index sends."""
    from queue_core.indexes import entries_args

    assert entries_args([], []) == entries_args(["A"], [""]) == entries_args(["A", "B"], ["", ""]) == [""]


def test_a_publish_of_one_message_reads_its_entries_as_a_call_of_many_does():
    """publish() of one message takes a way of its own (publish_entries._quick_one): the same
    entries as the general way for every shape a field can have in an object, headers too."""
    from queue_core.engine.base import to_bytes
    from queue_core.indexes import entries_text, hashes_of
    from queue_core.publish_entries import _clear_caches, hashed_entries

    fields = ((1, "payload.a.b"), (2, "payload.c"), (3, "header.t"))
    for payload in [{"a": {"b": 5}, "c": "x"}, {"a": {"b": [1, 2]}, "c": 7}, {"a": [{"b": 1}]}, {"a": 3},
                    {"c": {"d": 1}}, {"a": {"b": None}, "c": True}, {"a": {"b": 2.0}}, {"a": {"b": "42"}},
                    {"a": {"b": 2 ** 70}}, {"a": {1: "x", "b": 1}}, {}, {"a": {"b": "x" * 300}}]:
        for headers in (None, {"t": "acme"}):
            for _ in range(2):     # not cached, then cached
                raw = to_bytes(payload)
                want = _each(hashes_of(entries_text(fields, raw, headers)))
                assert _each(hashed_entries("t", fields, [raw], [0], headers, [payload])[0]) == want, payload
            _clear_caches()


def test_finding_one_message_whose_header_list_has_too_many_entries_is_refused():
    """publish() of one message takes publish_entries._quick_one for its payload fields; a header
    field's list still counts against MAX_ENTRIES (review finding: the one-message way returned
    before the cap, so one publish could append 100,000 entries in one script call)."""
    from queue_core.engine.base import to_bytes
    from queue_core.indexes import MAX_ENTRIES
    from queue_core.publish_entries import hashed_entries

    fields = ((1, "payload.a"), (2, "header.tags"))
    payload = {"a": 1}
    raw = to_bytes(payload)
    ok = hashed_entries("t", fields, [raw], [0], {"tags": list(range(MAX_ENTRIES - 1))}, [payload])
    assert len(ok[0]) == MAX_ENTRIES * 8
    with pytest.raises(InvalidArgument, match="at most"):
        hashed_entries("t", fields, [raw], [0], {"tags": list(range(MAX_ENTRIES))}, [payload])


def test_one_message_at_a_time_caches_a_value_the_second_time_it_is_met():
    """As a call's column does (_hash_column), publish() of one message caches a value's entries
    once it meets it again, not at first: a field of unique values published one at a time (an
    order id) would fill the cache with values never asked for again."""
    from queue_core.engine.base import to_bytes
    from queue_core.publish_entries import _HASHED, _clear_caches, hashed_entries

    _clear_caches()
    fields = ((7, "payload.o"),)
    first = None
    for _ in range(2):
        payload = {"o": "ORD-1"}
        first = first or hashed_entries("t", fields, [to_bytes(payload)], [0], None, [payload])
        assert hashed_entries("t", fields, [to_bytes(payload)], [0], None, [payload]) == first
    assert _HASHED[("7", str)] == {"ORD-1": first[0]}
    payload = {"o": "ORD-2"}
    hashed_entries("t", fields, [to_bytes(payload)], [0], None, [payload])
    assert "ORD-2" not in _HASHED[("7", str)]


def test_a_field_of_unique_values_is_hashed_without_lookups_and_looked_at_again_every_few_calls():
    """Once FRESH_STREAK calls in a row of a topic's field hashed a whole column of new plain
    values, its calls hash their column without looking values up or noting them, but for every
    FRESH_STREAK-th call, which looks again; a value met again, or found cached, ends the streak.
    Counted per topic and field (_STREAKS); the entries are the general way's throughout."""
    from queue_core.engine.base import to_bytes
    from queue_core.indexes import entries_text, hashes_of
    from queue_core.publish_entries import _SEEN, _STREAKS, FRESH_STREAK, _clear_caches, hashed_entries

    _clear_caches()
    fields = ((4, "payload.o"),)

    def check(topic, values):
        objects = [{"o": v} for v in values]
        raws = [to_bytes(o) for o in objects]
        got = hashed_entries(topic, fields, raws, range(len(raws)), None, objects)
        assert [_each(g) for g in got] == [_each(hashes_of(entries_text(fields, r, None))) for r in raws]

    def count(topic):
        return _STREAKS[(topic, "4")][0]

    calls = 0

    def unique(kind=str):
        nonlocal calls
        calls += 1
        return [f"ORD-{calls}-{i}" for i in range(30)] if kind is str else [calls * 1000 + i for i in range(30)]

    for _ in range(FRESH_STREAK):
        check("orders", unique())
        check("carts", ["a", "b"])        # another topic declaring the same field: values met again
    assert count("orders") == FRESH_STREAK and count("carts") == 0
    check("orders", unique())             # the FRESH_STREAK-th call looks, and notes its values
    looked = calls
    noted = len(_SEEN[("4", str)])
    for _ in range(FRESH_STREAK - 1):     # in the streak: nothing looked up or noted
        check("orders", unique())
    assert count("orders") == 2 * FRESH_STREAK and len(_SEEN[("4", str)]) == noted
    check("orders", unique())             # looks again
    assert count("orders") == 2 * FRESH_STREAK + 1 and len(_SEEN[("4", str)]) == noted + 30
    check("orders", unique(int))          # ints in the streak too (by their own seen set)
    check("orders", [10 ** 15 - 1, -(10 ** 15) + 1, 10 ** 15, 2 ** 60, 7])   # past EXACT: looked at closely
    check("orders", ["4.2e1", "-0", "007", "x" * 300, "a\0b", "new"])       # texts that need a closer look
    check("orders", [1, "x", None, {"a": 1}, [2, 3], 2.5, True])              # other kinds
    assert count("orders") == 2 * FRESH_STREAK + 2       # none of these counted, none cached before
    while count("orders") % FRESH_STREAK:
        check("orders", unique())
    check("orders", [f"ORD-{looked}-0", "fresh"])          # the look meets a value noted before
    assert count("orders") == 0
    for _ in range(FRESH_STREAK + 1):
        check("orders", unique())
    assert count("orders") == FRESH_STREAK + 1
    check("orders", [f"ORD-{looked}-0", f"ORD-{looked}-0", "x"])   # skipped: not looked at ...
    assert count("orders") == FRESH_STREAK + 2
    while count("orders") % FRESH_STREAK:
        check("orders", unique())
    check("orders", ["fresh", "x"])           # ... but the closer look above noted "x": met again at the look
    assert count("orders") == 0


def test_a_column_of_new_values_comes_back_whole_and_is_laid_out_as_the_list_would_be():
    """One payload field whose values are all new plain ints or texts: hashed_entries answers a
    HashBlock (each message one entry, one string), which entries_args passes on whole; it reads
    as the list the general way gives, and a run of it (a call of a larger publish, a partition's
    share) lays out the same entries as that run of the list."""
    from queue_core.engine.base import to_bytes
    from queue_core.engine.publish import _part
    from queue_core.ids import new_ids
    from queue_core.indexes import HashBlock, entries_args, entries_text, hashes_of
    from queue_core.publish_entries import _clear_caches, hashed_entries

    _clear_caches()
    fields = ((1, "payload.n"),)
    for values in ([10 ** 6 + i for i in range(300)], [f"ORD-{i}" for i in range(300)], ["a", "", "x y"]):
        objects = [{"n": v} for v in values]
        raws = [to_bytes(o) for o in objects]
        block = hashed_entries("t", fields, raws, range(len(raws)), None, objects)
        assert type(block) is HashBlock and len(block) == len(values)
        want = [hashes_of(entries_text(fields, r, None)) for r in raws]
        assert list(block) == want and block[len(want) - 1] == want[-1]
        ids = new_ids(len(values))
        for chunk in (list(range(len(values))), list(range(1, 3)), [0, 2]):
            part = _part(block, chunk)
            assert type(part) is (list if chunk == [0, 2] else HashBlock)
            assert entries_args([ids[i] for i in chunk], part) == entries_args([ids[i] for i in chunk], [want[i] for i in chunk])
    # Not one field alone, or a header field too, or a value met before: the list, as before.
    objects = [{"n": 5, "m": i} for i in range(10)]
    raws = [to_bytes(o) for o in objects]
    hashed_entries("t", fields, raws, range(10), None, objects)      # 5 is new: a block; cached the second time
    hashed_entries("t", fields, raws, range(10), None, objects)
    assert type(hashed_entries("t", fields, raws, range(10), None, objects)) is list
    assert type(hashed_entries("t", ((1, "payload.m"), (2, "payload.n")), raws, range(10), None, objects)) is list
    assert type(hashed_entries("t", ((1, "payload.m"), (2, "header.x")), raws, range(10), {"x": 1}, objects)) is list
