import random

from queue_core.ids import _encode, new_id, new_ids

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def reference(value: int) -> str:
    return "".join(CROCKFORD[(value >> (5 * (25 - i))) & 31] for i in range(26))


def test_fast_encoding_equals_the_ulid_definition():
    rng = random.Random(7)
    for value in [0, 1, (1 << 128) - 1] + [rng.getrandbits(128) for _ in range(2000)]:
        assert _encode(value) == reference(value)


def test_ids_are_unique_and_increase_across_batches():
    ids = new_ids(5000) + new_ids(3) + [new_id() for _ in range(200)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 26 for i in ids)
