"""Archive file names, and which files may hold the same event twice.

The archiver writes each batch of one partition's event stream, per UTC date, as
``part-p<partition>-<first entry id>_<last entry id>.parquet``: the file holds events of those
stream entries and no others. A file is only ever written again with the same entries (an
archiver that crashed before its XACK re-reads the same pending batch, so the rewrite replaces
the file), unless the re-read differed (the stream trimmed some of the batch's entries
meanwhile, or an older archiver re-read with another batch size): then two files' entry ranges
overlap. So an event can be in two files only if both are in one date/topic folder, of one
partition, with overlapping entry ranges, or one of them has a name that says no range (written
by an older archiver, or copied by hand).

The job de-duplicates the events of those "overlapping" files only, and counts every other file's
events as they are: the costly part of de-duplication (moving every event id through a shuffle)
is then paid only for the files that may need it, usually none.

Names are parsed from the paths Spark lists, so this works the same for local, HDFS or S3
archives and reads no file.
"""

import re
from collections import defaultdict
from collections.abc import Iterable
from urllib.parse import unquote

NAME = re.compile(r"^part-p(\d+)-(\d+)-(\d+)_(\d+)-(\d+)\.parquet$")


def file_name(partition: int, first_entry: str, last_entry: str) -> str:
    """The archiver's name for a file of these stream entries (ids "<ms>-<seq>")."""
    return f"part-p{partition}-{first_entry}_{last_entry}.parquet"


def entry_range(name: str) -> tuple[int, tuple[int, int], tuple[int, int]] | None:
    """(partition, first entry, last entry) from a file name, entries as (ms, seq); None when the
    name does not say (an older archiver's, a copy)."""
    match = NAME.match(name)
    if not match:
        return None
    p, first_ms, first_seq, last_ms, last_seq = map(int, match.groups())
    return p, (first_ms, first_seq), (last_ms, last_seq)


def overlapping(paths: Iterable[str]) -> set[str]:
    """The files whose events may also be in another file (see the module docstring): in a
    folder with a file whose name says no range, every file; else the files of one partition
    whose entry ranges overlap."""
    folders: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        folder, _, _ = path.rstrip("/").rpartition("/")
        folders[folder].append(path)
    out: set[str] = set()
    for files in folders.values():
        ranges = {path: entry_range(path.rpartition("/")[2]) for path in files}
        if len(files) > 1 and None in ranges.values():
            out.update(files)
            continue
        by_partition: dict[int, list[tuple[tuple, tuple, str]]] = defaultdict(list)
        for path, (p, first, last) in ((path, r) for path, r in ranges.items() if r):
            by_partition[p].append((first, last, path))
        for spans in by_partition.values():
            spans.sort()
            reach, holder = None, None   # the furthest last entry so far, and its file
            for first, last, path in spans:
                if reach is not None and first <= reach:
                    out.update((path, holder))
                if reach is None or last > reach:
                    reach, holder = last, path
    return out


def folder_partition(folder: str) -> tuple[str, str] | None:
    """(date, topic) of an archive folder as Spark lists it (``.../date=D/topic=T``), or None.
    Spark's listing is URI-encoded over Hive's own escaping (':' is ``%3A`` on disk and
    ``%253A`` listed), so each value is unquoted twice."""
    parent, _, topic_dir = folder.rpartition("/")
    date_dir = parent.rpartition("/")[2]
    if not (date_dir.startswith("date=") and topic_dir.startswith("topic=")):
        return None
    return unquote(unquote(date_dir[5:])), unquote(unquote(topic_dir[6:]))


def overlapping_by_partition(paths: Iterable[str]) -> dict[tuple[str, str], set[str]] | None:
    """The overlapping files as {(date, topic): file names}; None when one of them is not in a
    date/topic folder (then the job de-duplicates everything)."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in overlapping(paths):
        folder, _, name = path.rpartition("/")
        key = folder_partition(folder)
        if key is None:
            return None
        out[key].add(unquote(name))
    return dict(out)
