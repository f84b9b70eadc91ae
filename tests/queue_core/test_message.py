"""queue_core/message.py's own parts that need no server: Message.json's decoding."""

import json

from queue_core.message import decode_json


def outcome(fn, payload):
    """What ``fn(payload)`` gives: ("value", value as JSON text) or the exception's type and
    text (NaN compared as text: nan != nan)."""
    try:
        return "value", json.dumps(fn(payload), sort_keys=True)
    except Exception as exc:  # noqa: BLE001 - every exception is part of the outcome compared
        return type(exc).__name__, str(exc)


def test_message_json_decodes_as_json_loads_does_every_kind_of_payload():
    """decode_json (Message.json) takes json's scanner directly for a payload that is one UTF-8
    JSON value without whitespace around it, and json.loads for everything else: the same value
    or the same error either way, for each kind a worker may meet."""
    payloads = [b'{"a":1}', b'[1,2]', b'"x"', b"12", b"1", b"", b" 1", b"1 ", b"\n{}\n", b'{"a":NaN}',
                b"Infinity", b"-Infinity", b"\xef\xbb\xbf{}", b'{"a":1}x', b"nul", b"{", b'{"a":}',
                '"é😀"'.encode(), '"\ud800"'.encode("utf-8", "surrogatepass"), b'"\xff"', b'"\xc3"',
                "[1]".encode("utf-16"), "[1]".encode("utf-16-le"), "[1]".encode("utf-32"), b"\x00\x00",
                b"[" * 100_000 + b"]" * 100_000, b'{"a":1,"a":2}', b"1e400", b"-0", b"0.1"]
    for p in payloads:
        assert outcome(decode_json, p) == outcome(json.loads, p), p[:20]


def test_message_json_decodes_as_json_loads_does_any_bytes():
    """Property (hypothesis): any bytes, and JSON texts of any value with any whitespace around
    them and in any of the encodings json.loads detects, decode to the same value or fail with
    the same error."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                          max_leaves=8)
    spaces = st.text(alphabet=" \t\n\r", max_size=2)
    texts = st.builds(lambda a, v, b, compact: a + json.dumps(v, separators=(",", ":") if compact else None,
                                                              ensure_ascii=False) + b, spaces, values, spaces,
                      st.booleans())
    payloads = st.binary(max_size=40) | st.builds(lambda t, enc: t.encode(enc, "surrogatepass"), texts,
                                                  st.sampled_from(["utf-8", "utf-8", "utf-16", "utf-32-le"]))

    @settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(payloads)
    def check(p):
        assert outcome(decode_json, p) == outcome(json.loads, p)

    check()


def test_finding_message_json_of_a_payload_that_is_not_bytes_is_json_loads_own():
    """A hand-made Message may hold text, a bytearray or a memoryview: json() answers as json.loads
    does for each (the scanner's way is for bytes only)."""
    for p in ['{"a":1}', " 1", "x", bytearray(b'{"a":1}'), memoryview(b'{"a":1}'), 12]:
        assert outcome(decode_json, p) == outcome(json.loads, p), p
