"""Docs that state what the code or a measurement says, checked against it (no server needed)."""

import inspect
import re

from queue_core import DelayQueue
from tests.conftest import ROOT


def test_every_batch_call_in_the_docs_names_its_topic_first():
    """q.batch's first parameter is the topic (engine/batch.py); README once showed it without."""
    assert list(inspect.signature(DelayQueue.batch).parameters)[:2] == ["self", "topic"]
    for doc in ("README.md", "docs/design.md"):
        calls = re.findall(r"q\.batch\(([^)]*)", (ROOT / doc).read_text())
        assert calls, doc
        for args in calls:
            assert args.strip() == "..." or not re.match(r"\s*\w+\s*=", args), (doc, f"q.batch({args}")


def test_the_design_doc_gives_the_measured_memory_per_kept_dedup_key():
    """bench/RESULTS.md records the measurement (bench.engine --only dedup); design.md quotes it."""
    measured = re.search(r"\*\*(\d+) B\*\* of Redis memory \(a 14-byte key",
                         (ROOT / "bench/RESULTS.md").read_text())
    quoted = re.search(r"A kept key costs (\d+) B of Redis memory", (ROOT / "docs/design.md").read_text())
    assert measured and quoted and quoted.group(1) == measured.group(1)
