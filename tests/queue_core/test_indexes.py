"""queue_core.indexes: what an indexed field holds for a message and how a query value is looked
up, the one mapping the publish script and the search share."""

import pytest

from queue_core import InvalidArgument
from queue_core.indexes import check_fields, entries, entry_text, lookup_text
from queue_core.query import parse


def test_fields_are_query_paths_at_most_four_each_once():
    assert check_fields(["payload.customer.id", "header.tenant"]) == ("payload.customer.id", "header.tenant")
    for bad in (["payload"], ["key"], ["payload.a b"], ["error.x"]):
        with pytest.raises(InvalidArgument, match="payload.<path> or header.<name>"):
            check_fields(bad)
    with pytest.raises(InvalidArgument, match="at most 4"):
        check_fields([f"payload.f{i}" for i in range(5)])
    with pytest.raises(InvalidArgument, match="twice"):
        check_fields(["payload.a", "payload.a"])
    with pytest.raises(InvalidArgument, match="a list of fields"):
        check_fields("payload.a")


def test_a_message_has_one_entry_per_scalar_at_the_path():
    fields = ("payload.customer.id", "payload.tags", "header.tenant", "payload.missing")
    payload = {"customer": {"id": 42.0}, "tags": ["vip", "eu", "vip", {"x": 1}, [2]]}
    assert entries(fields, payload, {"tenant": "acme"}) == [(1, "42"), (2, "vip"), (2, "eu"), (3, "acme")]
    assert entries(fields, None, None) == []                       # not JSON: nothing to index
    assert entries(("payload.customer",), payload, None) == []     # an object is never equal to a value
    assert entries(("payload.0.n",), [{"n": True}], None) == [(1, "true")]


@pytest.mark.parametrize("value, text", [
    (42, "42"), (42.0, "42"), ("42.0", "42"), ("4.2e1", "42"), (0.5, "0.5"), ("-0", "0"), ("042", "042"),
    (None, "null"), (False, "false"), ("x" * 200, "x" * 200), ("x" * 201, None), ("a\0b", None)])
def test_entry_texts(value, text):
    assert entry_text(value) == text


def test_every_message_an_equality_term_matches_is_found_under_its_lookup_text():
    """The index may hold candidates the query rejects (re-checked), never miss one it accepts."""
    values = [42, 42.0, "42", "42.0", "4.2e1", 7, "7", "acme", "ACME", True, None, "", 0.1, "0.10", -3]
    wants = ["42", "42.0", "4.2e1", "7", "acme", "true", "null", "0.1", "-3", '""']
    for want in wants:
        q = parse(f"payload.v:{want}")
        look = lookup_text(q.terms[0].value)
        for v in values:
            if q.matches({"payload": {"v": v}, "headers": {}}):
                assert (1, look) in entries(("payload.v",), {"v": v}, None), (want, v)


def test_a_wildcard_a_nul_or_an_overlong_value_is_not_looked_up():
    assert lookup_text("order-*") is None and lookup_text("a\0") is None and lookup_text("x" * 201) is None
    assert lookup_text("order-7") == "order-7" and lookup_text("1e2") == "100"


def test_an_entry_hash_never_changes_and_tells_values_apart():
    """Stored logs hold these letters: a hash that changed would make every index answer nothing
    for the messages published before (they need a rebuild). And 8,000 order ids get 8,000
    hashes, spread over every letter."""
    from queue_core.indexes import entry_hash

    assert entry_hash(1, "42") == "bkcoockp"
    assert entry_hash(2, "h\u00e9llo") == "inddkipm"                    # UTF-8 bytes
    hashes = [entry_hash(1, f"ORD-{n * 7919 % 100_003:06d}") for n in range(8000)]
    assert len(set(hashes)) == 8000 and {h[0] for h in hashes} == set("abcdefghijklmnop")
    assert all(len(h) == 8 and set(h) <= set("abcdefghijklmnop") for h in hashes)
