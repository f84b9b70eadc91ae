"""The Python <-> Lua contracts: key names, state names and the error-group index format are
defined once in Python (scripts.header() hands them to Lua); these tests fail when a script uses
something the Python side does not define, or writes a format the readers do not expect."""

import re
from pathlib import Path

import pytest

from queue_core import RetryPolicy
from queue_core.fingerprint import PARENT_GONE_FP
from queue_core.keys import (
    GROUP_KEY_NAMES,
    HELD_BASE,
    PARTITION_KEY_NAMES,
    WAITING_SCORE,
    fp_member,
    partition_of,
)
from queue_core.scripts import header
from queue_core.states import ALL_STATES

LUA = sorted(Path(__file__).resolve().parents[2].joinpath("queue_core", "lua").rglob("*.lua"))


def test_scripts_use_only_the_key_names_python_defines():
    """P.<name> is a partition key, G.<name> and gk.<name> a group key (lua/includes/base.lua)."""
    accesses = [m.groups() for path in LUA for m in re.finditer(r"\b(P|G|gk)\.([a-z_]+)", path.read_text())]
    partition = {name for var, name in accesses if var == "P"}
    group = {name for var, name in accesses if var != "P"}
    assert partition and group
    assert partition <= set(PARTITION_KEY_NAMES), partition - set(PARTITION_KEY_NAMES)
    assert group <= set(GROUP_KEY_NAMES), group - set(GROUP_KEY_NAMES)


def test_the_generated_header_carries_the_python_names():
    text = header()
    for name in (s.value for s in ALL_STATES):
        assert f"'{name}'" in text or f'"{name}"' in text, name
    # The keys by name, in keys.py's order: P from KEYS[1], each group block from KEYS[b + 1].
    assert "local P = {" + ", ".join(f"{n} = KEYS[{i}]" for i, n in enumerate(PARTITION_KEY_NAMES, 1)) + "}" in text
    assert "return {" + ", ".join(f"{n} = KEYS[b + {i}]" for i, n in enumerate(GROUP_KEY_NAMES, 1)) + "}" in text


def test_a_waiting_child_has_the_score_python_reads_as_not_due(dq):
    """publish(after=) writes WAITING_SCORE (from the header), beyond every held score: readers
    show no due time, and a ParentGone dead letter carries the fingerprint Python computes."""
    assert f"local WAITING_SCORE = {WAITING_SCORE}\nlocal PARENT_GONE_FP = '{PARENT_GONE_FP}'\n" in header()
    parent = dq.publish("t", "A", delay=60)
    child = dq.publish("t", "B", after=parent)
    assert dq.redis.zscore(dq.keys("t", partition_of(child)).pending, child) == WAITING_SCORE > HELD_BASE * 1.5
    m = dq.get("t", child)
    assert not m.held and m.due_at is None and m.waiting_for == parent   # waiting, not held behind a key
    dq.cancel("t", parent)
    assert dq.get("t", child).last_error.fingerprint == PARENT_GONE_FP


@pytest.mark.single_group
def test_the_error_group_index_member_is_what_python_reads(dq):
    dq.configure_topic("orders", retry=RetryPolicy.fixed(0, max_attempts=1))
    mid = dq.publish("orders", "x")
    [d] = dq.claim("orders")
    dq.nack(d, ValueError("boom"))
    message = dq.get("orders", mid)
    k = dq.keys("orders")
    members = [m.decode() for m in dq.redis.zrange(k.fp_index, 0, -1)]
    dead_ms = int(message.dead_at.timestamp() * 1000)
    assert members == [fp_member(message.last_error.fingerprint, dead_ms, mid)]
    [group] = dq.error_groups("orders")
    assert group.count == 1 and dq.group_page("orders", group.fingerprint).messages[0].id == mid


def test_each_script_gets_only_the_keys_it_touches():
    """key_usage() reads a script and the helpers it calls; the header and the Python side agree
    on that subset. A script that indexed KEYS itself would break the subsetting."""
    from queue_core.scripts import SCRIPT_NAMES, _KeyPicker, key_usage, source

    for name in SCRIPT_NAMES:
        used_p, used_g = key_usage(name)
        if name == "counts":
            continue
        text = (LUA[0].parent / f"{name}.lua").read_text()
        assert "KEYS[" not in text, name
        assert f"local NPK, NGK = {len(used_p)}, {len(used_g)}\n" in source(name)
        block = ", ".join(f"{n} = KEYS[b + {i}]" for i, n in enumerate(used_g, 1))
        assert f"  return {{{block}}}\n" in source(name), name
    assert key_usage("extend") == ((), ("unacked", "leases", "cancels"))
    assert len(key_usage("ack")[1]) < len(GROUP_KEY_NAMES)
    full = [f"p:{n}" for n in PARTITION_KEY_NAMES] + [f"g1:{n}" for n in GROUP_KEY_NAMES] + [
        f"g2:{n}" for n in GROUP_KEY_NAMES]
    picked = _KeyPicker("publish", None).pick(full)
    used_p, used_g = key_usage("publish")
    assert picked == [f"p:{n}" for n in used_p] + [f"g1:{n}" for n in used_g] + [f"g2:{n}" for n in used_g]
    with pytest.raises(ValueError, match="whole blocks"):
        _KeyPicker("publish", None).pick(full[:-1])
