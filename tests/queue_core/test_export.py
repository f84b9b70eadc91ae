"""export (queue_core/export.py, delayq export): a state or a query's matches as JSON Lines or CSV,
read a page at a time."""

import csv
import io
import json

from queue_core import export

from .test_cli import cli


def test_it_walks_a_whole_state_across_pages(dq, monkeypatch):
    monkeypatch.setattr(export, "PAGE", 7)               # several pages, and a last partial one
    ids = dq.publish_many("t", [{"n": i} for i in range(30)], headers={"tenant": "acme"})
    rows = [export.row(m) for m in export.messages(dq, "t", "ready")]
    assert sorted(r["id"] for r in rows) == sorted(ids)
    first = next(r for r in rows if r["id"] == ids[0])
    assert first["state"] == "ready" and first["headers"] == {"tenant": "acme"} and json.loads(first["payload"]) == {"n": 0}
    assert tuple(first) == export.COLUMNS


def test_it_exports_only_a_querys_matches_and_a_time_range(dq):
    now = dq.server_ms()
    early = dq.publish_many("t", [{"n": i % 2} for i in range(6)], delay=100)
    late = dq.publish_many("t", [{"n": i % 2} for i in range(6)], delay=1000)
    odd = {m.id for m in export.messages(dq, "t", "pending", "payload.n:1")}
    assert odd == set(early[1::2] + late[1::2])
    assert {m.id for m in export.messages(dq, "t", "pending", since_ms=now + 500_000)} == set(late)
    assert {m.id for m in export.messages(dq, "t", "pending", "payload.n:0", until_ms=now + 500_000)} == set(early[::2])


def test_jsonl_and_csv_carry_the_same_rows(dq):
    dq.publish("t", {"note": 'a "quoted", comma\nline'}, key="k-1", headers={"h": "1"})
    rows = [export.row(m) for m in export.messages(dq, "t", "ready")]
    [line] = list(export.lines("jsonl", rows))
    assert json.loads(line) == rows[0]
    [parsed] = list(csv.DictReader(io.StringIO("".join(export.lines("csv", rows)))))
    assert parsed["key"] == "k-1" and json.loads(parsed["payload"]) == {"note": 'a "quoted", comma\nline'}
    assert json.loads(parsed["headers"]) == {"h": "1"} and list(parsed) == list(export.COLUMNS)


def test_the_cli_exports_to_stdout_or_a_file(dq, engine_url, tmp_path):
    ids = dq.publish_many("jobs", [{"n": i % 3} for i in range(9)])
    done = cli("export", "--url", engine_url, "--topic", "jobs", "--state", "ready", "--query", "payload.n:2")
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(line)["id"] for line in done.stdout.splitlines()) == sorted(ids[2::3])
    assert "exported 3 ready message(s)" in done.stderr
    out = tmp_path / "ready.csv"
    done = cli("export", "--url", engine_url, "--topic", "jobs", "--state", "ready", "--format", "csv", "--out", str(out))
    assert done.returncode == 0 and len(list(csv.DictReader(out.open()))) == 9
    bad = cli("export", "--url", engine_url, "--topic", "jobs", "--state", "ready", "--query", "paylod.x:1")
    assert bad.returncode == 2 and "unknown field" in bad.stderr
