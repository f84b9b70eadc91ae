"""report (lua/report.lua) and journal(): what handlers report with message.progress() and
message.log(), fenced by the lease, capped (last 100 lines / 64 KiB), kept with the message while
it retries or is dead, deleted with it."""

import pytest

from queue_core import InvalidArgument, MessageState, RetryPolicy
from queue_core.journal import MAX_BYTES, MAX_LINE, MAX_LINES

from .helpers import data_keys_empty, entries


def test_progress_and_log_are_buffered_until_reported(dq):
    """The calls themselves touch no Redis; report() sends them, journal() reads them back."""
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    d.message.progress(0.25, "step 1/4")
    d.message.log("fetched 12 rows")
    d.message.progress(0.5, "step 2/4")
    assert dq.journal("t", mid).empty            # nothing sent yet
    assert dq.report([d]) == [0]
    j = dq.journal("t", mid)
    assert (j.progress, j.note, j.progress_attempt) == (0.5, "step 2/4", 1)
    assert [(line.attempt, line.text) for line in j.lines] == [(1, "fetched 12 rows")]
    assert j.lines[0].at is not None and j.progress_at is not None
    d.message.log("line two\nwith its own newline")
    assert dq.report([d]) == [0] and dq.report([d]) == [0]   # a second report has nothing to send
    assert [line.text for line in dq.journal("t", mid).lines] == ["fetched 12 rows", "line two\nwith its own newline"]
    dq.ack(d)
    assert dq.journal("t", mid).empty            # gone with the message
    assert data_keys_empty(dq, "t")


def test_the_log_keeps_the_last_lines_and_bytes(dq):
    """Past 100 lines or 64 KiB the oldest lines go, in the buffer and in Redis alike."""
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    for i in range(150):
        d.message.log(f"line {i}")
    dq.report([d])
    for i in range(150, 180):
        d.message.log(f"line {i}")
    dq.report([d])
    lines = dq.journal("t", mid).lines
    assert len(lines) == MAX_LINES and lines[0].text == "line 80" and lines[-1].text == "line 179"
    for _ in range(80):
        d.message.log("x" * 5000)                 # cut at MAX_LINE characters each
    dq.report([d])
    lines = dq.journal("t", mid).lines
    shown = [len(f"{int(line.at.timestamp() * 1000)}|1|{line.text}".encode()) for line in lines]
    xs = [line for line in lines if line.text.startswith("x" * MAX_LINE)]
    assert "characters cut" in lines[-1].text and lines[-len(xs):] == tuple(xs)
    assert sum(shown) <= MAX_BYTES and len(xs) == MAX_BYTES // shown[-1]   # as many long lines as 64 KiB holds
    assert len(lines) == MAX_LINES or sum(shown) + shown[-1] > MAX_BYTES
    # Stored: at most one 4 KiB chunk beyond what is shown, in about 20 fields.
    key = dq.keys("t", d.partition).journal
    fields = [f for f in dq.redis.hkeys(key) if f.startswith(mid.encode() + b"|")]
    assert len(fields) <= 20 and sum(dq.redis.hstrlen(key, f) for f in fields) <= MAX_BYTES + 4096 + 2 * 2100
    dq.ack(d)


def test_only_the_lease_holder_writes(dq):
    """A stale token writes nothing (fencing) and hears why: lease lost, or cancelled."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0))
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    dq.nack(d, "retry")
    d.message.log("from a worker that lost its lease")
    assert dq.report([d]) == [-3]
    [d2] = dq.claim("t", 1)
    dq.cancel("t", mid, running=True)
    d2.message.progress(1.0, "done")
    assert dq.report([d2]) == [-8] and d2.message.cancelled
    assert dq.journal("t", mid).empty


def test_the_journal_stays_with_a_retrying_and_a_dead_message(dq):
    """Kept through retries and into the dead-letter queue, lines tagged by attempt; deleted
    with the dead letter."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=2))
    mid = dq.publish("t", "work")
    for attempt in (1, 2):
        [d] = dq.claim("t", 1)
        d.message.log(f"try {attempt}")
        d.message.progress(0.1 * attempt)
        dq.report([d])
        dq.nack(d, "boom")
    assert dq.get("t", mid).state is MessageState.dead
    j = dq.journal("t", mid)
    assert [(line.attempt, line.text) for line in j.lines] == [(1, "try 1"), (2, "try 2")]
    assert (j.progress, j.progress_attempt) == (0.2, 2)
    dq.delete("t", [mid])
    assert dq.journal("t", mid).empty
    assert entries(dq, dq.keys("t", 0).journal) == 0


def test_progress_refuses_a_fraction_outside_0_to_1(dq):
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    for bad in (-0.1, 1.5, "half", None):
        with pytest.raises(InvalidArgument, match="between 0 and 1"):
            d.message.progress(bad)
    assert not d.message._journal
    dq.ack(d)
    assert dq.journal("t", "NOPE").empty and dq.get("t", mid) is None


def test_a_big_report_goes_in_short_calls(dq):
    """More messages or lines than one call should carry are split over calls; all are written."""
    mids = dq.publish_many("t", [str(i) for i in range(120)])
    ds = dq.claim("t", 120)
    for d in ds:
        d.message.log(f"line of {d.message.text()}")
        if d.message.text() == "0":
            for i in range(99):
                d.message.log(f"more {i}")
    assert dq.report(ds) == [0] * 120
    for d in ds:
        lines = dq.journal("t", d.id).lines
        assert lines[0].text == f"line of {d.message.text()}" and len(lines) == (100 if d.message.text() == "0" else 1)
    dq.ack_many(ds)
    assert all(dq.journal("t", mid).empty for mid in mids)
    assert data_keys_empty(dq, "t")


def test_finding_the_unsent_journal_buffer_is_bounded():
    """A review found a handler logging in a tight loop grew the buffer without limit between
    two keeper ticks (45 MB for 300,000 calls): it keeps what a report would send anyway."""
    from queue_core.journal import MAX_LINES, JournalBuffer, log_line, progress_value

    buf = JournalBuffer()
    for i in range(10 * MAX_LINES):
        buf.lines.append(log_line(f"line {i}", 1))
        buf.progress.append(progress_value(i / (10 * MAX_LINES), "", 1))
    progress, lines = buf.take()
    assert len(lines) == MAX_LINES and lines[-1].endswith(f"line {10 * MAX_LINES - 1}") and progress.startswith("0.999")
