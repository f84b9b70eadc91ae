"""The dashboard's side of the event archive: run the archiver, restore evicted messages from it.

pyarrow comes with the ``analytics`` extra; without it these functions raise ArchiveUnavailable
saying what to install, and the rest of the dashboard works as before.
"""

import json
import os

from .. import audit, conf
from ..conf import archive_dir
from .contracts import NotReplicated
from .engine import get_queue


class ArchiveUnavailable(RuntimeError):
    pass


def _pipeline():
    try:
        from delayq_analytics import archiver
    except ImportError as exc:  # pyarrow missing
        raise ArchiveUnavailable(f"the event archive needs pyarrow ({exc}); install it with "
                                 f"`pip install 'delayq[analytics]'`") from exc
    return archiver


def run_archiver(topics: list[str] | None = None, *, flush: bool = False):
    """One bounded archiver run over every topic (or ``topics``); returns its ArchiveReport.
    Without ``flush``, a quiet topic's events wait up to DELAYQ_ARCHIVE_MAX_WAIT seconds (default
    300) for a fuller file."""
    archiver = _pipeline()
    max_wait = 0.0 if flush else conf.archive_max_wait()
    try:
        worker = archiver.Archiver(get_queue(), archive_dir(), max_wait=max_wait)
    except ValueError as exc:
        raise ArchiveUnavailable(str(exc)) from exc
    os.makedirs(worker.root, exist_ok=True)
    return worker.run_once(topics)


def find_evicted(topic: str, *, ids: list[str] | None = None, fingerprint: str | None = None,
                 since_ms: int | None = None, until_ms: int | None = None) -> list[dict]:
    """Evicted messages of ``topic`` in the archive (the only events that carry the payload),
    oldest first, one row per message (its latest eviction)."""
    _pipeline()
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from delayq_analytics.archiver import local_root

    root = local_root(archive_dir())
    if not os.path.isdir(root):
        return []
    dataset = ds.dataset(root, format="parquet", partitioning="hive")
    cond = (pc.field("event") == "evicted") & (pc.field("topic") == topic)
    if ids:
        cond &= pc.field("msg").isin(ids)
    if fingerprint:
        cond &= pc.field("fp") == fingerprint
    if since_ms is not None:
        cond &= pc.field("ts") >= since_ms
    if until_ms is not None:
        cond &= pc.field("ts") < until_ms
    rows = dataset.to_table(filter=cond, columns=["msg", "ts", "fp", "reason", "meta", "payload"]).to_pylist()
    latest: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: r["ts"]):
        latest[row["msg"]] = row
    return list(latest.values())


def restore(topic: str, rows: list[dict], user=None) -> list[tuple[str, str]]:
    """Publish each evicted message again (new id, same payload, headers and max attempts, ready
    now). The dedup key is the original's, or ``restore:<old id>`` so a second restore while the
    first copy is still queued returns that copy instead of a duplicate. Audited."""
    q = get_queue()
    done, unconfirmed = [], None
    for row in rows:
        try:
            meta = json.loads(row["meta"] or "{}")
        except ValueError:
            meta = {}
        headers = None
        if meta.get("hdr"):
            try:
                headers = json.loads(meta["hdr"]) if isinstance(meta["hdr"], str) else meta["hdr"]
            except ValueError:
                headers = None
        try:
            key = meta.get("key") or f"restore:{row['msg']}"
            if "\0" in key:
                # An internal key (a batch callback's, engine/batch.py) is no user's to publish.
                key = f"restore:{row['msg']}"
            new_id = q.publish(topic, row["payload"] or b"", key=key, headers=headers,
                               max_attempts=int(meta.get("max") or 0) or None, actor="restore")
            if getattr(new_id, "outcome", "published") != "published" and new_id == row["msg"]:
                # The original's key is still held by the evicted message itself (its dedup window
                # opened at the eviction): restore under a key of its own, not as a "duplicate".
                new_id = q.publish(topic, row["payload"] or b"", key=f"restore:{row['msg']}", headers=headers,
                                   max_attempts=int(meta.get("max") or 0) or None, actor="restore")
        except NotReplicated as exc:
            # Published on the master, unconfirmed: audit what exists, then stop (a rerun is safe: same keys).
            done.append((row["msg"], exc.ids[0]))
            unconfirmed = exc
            break
        done.append((row["msg"], new_id))
    audit.record(user, "message.restore", topic=topic, requested=len(rows), affected=len(done),
                 message_ids=[old for old, _ in done], result="unconfirmed" if unconfirmed else "ok",
                 detail="restored from the archive: " + ", ".join(f"{old} -> {new}" for old, new in done)
                 + (f"; stopped: {unconfirmed}" if unconfirmed else ""))
    if unconfirmed:
        raise unconfirmed
    return done
