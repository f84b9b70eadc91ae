"""The query language (queue_core/query.py): parsing, its refusals, and the Python evaluation."""

import pytest

from queue_core.query import QueryError, glob_match, parse


def test_it_parses_each_kind_of_term():
    q = parse('payload.customer.id:42 payload.note:"late \\"fee\\"" header.tenant:acme error:TimeoutError '
              'key:order-* attempts>=3')
    assert [(t.field, t.path, t.op, t.value) for t in q.terms] == [
        ("payload", ("customer", "id"), ":", "42"), ("payload", ("note",), ":", 'late "fee"'),
        ("header", ("tenant",), ":", "acme"), ("error", (), ":", "TimeoutError"), ("key", (), ":", "order-*"),
        ("attempts", (), ">=", "3")]
    assert parse(q.text()) == q            # text() writes what parse() reads back
    assert parse("01JD4ABCDEFG").lookup == "01JD4ABCDEFG" and not parse("01JD4ABCDEFG").terms
    assert not parse("   ")
    # a key with colons whose first part names no field is a word too; a dotted typo is not
    assert parse("schedule:daily:42").lookup == "schedule:daily:42"
    with pytest.raises(QueryError, match="unknown field"):
        parse("paylod.customer:42")


@pytest.mark.parametrize(("text", "says"), [
    ("paylod.x:1", "unknown field 'paylod'"),
    ("paylod:1 key:x", "unknown field 'paylod'"),
    ("payload:1", "payload needs a path"),
    ("key.x:1", "key takes no path"),
    ('payload.note:"late fee', "unclosed quote"),
    ("attempts>=three", "whole number"),
    ("key>=3", "key takes ':'"),
    ("a b", "has no field"),
    ("payload.a:" + "x" * 201, "at most 200"),
    (" ".join(["key:a"] * 9), "at most 8"),
    ("key:" + "*" * 5, "wildcards"),
    ("x" * 501, "at most 500"),
])
def test_it_refuses_malformed_queries_saying_what_is_wrong(text, says):
    with pytest.raises(QueryError, match=says):
        parse(text)


def test_glob_is_linear_and_anchored():
    assert glob_match("order-*", "order-12") and not glob_match("order-*", "xorder-12")
    assert glob_match("*fee*", "a late fee") and glob_match("a*b*c", "aXbYc") and not glob_match("a*b*c", "acb")
    assert glob_match("ab*ab", "abab") and not glob_match("ab*ab", "aba")
    assert glob_match("*", "") and not glob_match("x", "")


def test_python_evaluation_follows_the_same_rules():
    q = parse("payload.customer.id:42 payload.tags:vip error:timeout attempts<3")
    fields = {"payload": {"customer": {"id": 42.0}, "tags": ["eu", "vip"]}, "headers": {}, "attempts": 2,
              "error": "TimeoutError: Upstream TIMEOUT"}
    assert q.matches(fields)
    assert not q.matches({**fields, "attempts": 3})
    assert not q.matches({**fields, "payload": {"customer": {"id": 43}, "tags": ["vip"]}})
    assert not parse("payload.customer:42").matches(fields)
    dispatch = parse("fairness_key:acme* priority>=5")
    assert dispatch.matches({**fields, "fairness_key": "acme-eu", "priority": 7})
    assert not dispatch.matches({**fields, "fairness_key": "acme-eu", "priority": 4})
    assert not dispatch.matches({**fields, "fairness_key": None, "priority": 9})
