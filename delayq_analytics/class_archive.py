"""A class-data archive for the analytics job's driver JVM, so Spark starts in a fraction of the time.

Most of a small run is the JVM loading, parsing and verifying Spark's classes. Java's class-data
sharing (AppCDS) keeps them in an archive file that later JVMs map straight into memory. Java 17
writes such an archive only when a JVM started with ``-XX:ArchiveClassesAtExit`` exits, and
writing it (~180 MiB) made that run ~30 s slower here. So a run never writes it itself: when the
CLI ran without one, ``spark.stop()`` starts this module detached (its own session, no inherited
pipes: the caller is not kept waiting), which runs the job once over a tiny generated archive in a
JVM that writes the class archive at exit, and renames the file into place only after that JVM
exited cleanly, so no run ever maps a half-written archive. The runs after it start from it.

One archive per Java and Spark (its jars): the file name carries a hash of both; writing a new one
removes the archives no run has started from for 30 days (the others may belong to another
install sharing the folder). ``DELAYQ_SPARK_CLASS_ARCHIVE`` names another folder, or ``off``. A JVM that
cannot use the archive (another JVM build, other jars) ignores it and starts as usual.

    python -m delayq_analytics.class_archive [PATH]   # write it now, in the foreground
"""

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

ENV = "DELAYQ_SPARK_CLASS_ARCHIVE"
PREFIX = "spark-classes-"
# A lock older than this belongs to a builder that died: another may start.
STALE_S = 3600
UNUSED_S = 30 * 86400
JVM_EXIT_TIMEOUT_S = 300


def folder(env=os.environ) -> str | None:
    chosen = env.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "false", "no") else chosen
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "delayq")


def archive_path(java_version: str, env=os.environ) -> str | None:
    """Where the archive for this Java and this Spark is (or goes); None when turned off."""
    where = folder(env)
    if where is None:
        return None
    import pyspark

    from delayq_analytics.spark import java_binary

    home = env.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))
    try:
        jars = sorted(os.listdir(os.path.join(home, "jars")))
    except OSError:
        jars = []
    java = os.path.realpath(java_binary() or "java")
    key = hashlib.sha256("\n".join([java, java_version, pyspark.__version__, home, *jars]).encode()).hexdigest()
    return os.path.join(where, f"{PREFIX}{key[:16]}.jsa")


def start_options(path: str) -> str:
    with contextlib.suppress(OSError):
        os.utime(path)   # in use: see _tidy()
    return f"-XX:SharedArchiveFile={path}"


def _take_lock(path: str) -> bool:
    lock = f"{path}.lock"
    for _ in range(2):
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            try:
                if time.time() - os.path.getmtime(lock) < STALE_S:
                    return False
                os.remove(lock)
            except OSError:
                return False
        except OSError:
            return False
    return False


def build_in_background(path: str) -> bool:
    """Start a detached builder for ``path`` unless one is at work already (or the folder is not
    writable: a start-up optimisation never fails a run). True when one was started."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        return False
    if not _take_lock(path):
        return False
    try:
        subprocess.Popen([sys.executable, "-m", "delayq_analytics.class_archive", "--locked", path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        os.remove(f"{path}.lock")
        return False
    return True


def _tidy(path: str) -> None:
    """Remove the archives of other Java/Spark versions unused for UNUSED_S and what dead builders
    left."""
    where, mine = os.path.dirname(path), os.path.basename(path)
    for name in os.listdir(where):
        if not name.startswith(PREFIX) or name.startswith(mine):
            continue
        old = os.path.join(where, name)
        try:
            if time.time() - os.path.getmtime(old) > (UNUSED_S if name.endswith(".jsa") else STALE_S):
                os.remove(old)
        except OSError:
            pass


def _tiny_archive(root: str) -> None:
    """A few events of every kind the job reads, so the run loads the classes every run loads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from delayq_analytics.schema import ARROW_SCHEMA

    t0 = 1_700_000_000_000
    rows = []
    for n, ending in enumerate(("acked", "dead", "acked")):
        msg, ts = f"m{n}", t0 + n * 61_000
        steps = [("published", None, 0), ("claimed", "billing", 1), ("nacked", "billing", 1), ("claimed", "billing", 2),
                 (ending, "billing", 2)]
        if ending == "dead":
            steps += [("replayed", "billing", 0), ("claimed", "billing", 1), ("acked", "billing", 1)]
        for i, (event, group, attempt) in enumerate(steps):
            rows.append({"event_id": f"0-{ts}-{n}-{i}", "event": event, "msg": msg, "ts": ts + i * 10, "attempt": attempt,
                         "due": ts, "lateness_ms": 3 if event == "claimed" else None,
                         "handler_ms": 1_500 if event in ("acked", "nacked", "dead") else None,
                         "fp": "fp0" if event in ("nacked", "dead") else None,
                         "next": {"nacked": "retrying"}.get(event), "group": group, "partition": 0})
    folder_ = os.path.join(root, "date=2023-11-14", "topic=warmup")
    os.makedirs(folder_)
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), os.path.join(folder_, "part-0.parquet"))


def build(path: str) -> bool:
    """Write the archive for this Java and Spark at ``path`` (the caller holds the lock). True when
    it is in place."""
    from pyspark import SparkContext

    from delayq_analytics import run
    from delayq_analytics.spark import session

    _tidy(path)
    writing = f"{path}.{os.getpid()}.tmp"
    work = tempfile.mkdtemp(prefix="delayq-class-archive-")
    try:
        _tiny_archive(os.path.join(work, "archive"))
        spark = session("local[2]", app="delayq-class-archive", input_bytes=1,
                        jvm_options=f"-XX:ArchiveClassesAtExit={writing}")
        try:
            run.run(spark, os.path.join(work, "archive"), os.path.join(work, "out"), progress=lambda *a, **k: None)
        finally:
            spark.stop()
        proc = SparkContext._gateway.proc    # the JVM: it exits at EOF on its stdin, writing the archive
        proc.stdin.close()
        proc.wait(timeout=JVM_EXIT_TIMEOUT_S)
        if proc.returncode == 0 and os.path.getsize(writing) > 0:
            os.replace(writing, path)
            return True
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.exists(writing):
            os.remove(writing)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    locked = "--locked" in args
    args = [a for a in args if a != "--locked"]
    from delayq_analytics.spark import check_java

    path = args[0] if args else archive_path(check_java())
    if path is None:
        print(f"the class archive is turned off ({ENV})", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not locked and not _take_lock(path):
        print(f"another process is writing {path} (its lock {path}.lock is fresh)", file=sys.stderr)
        return 1
    try:
        done = build(path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(f"{path}.lock")
    print(path if done else f"the JVM did not write {path}", file=sys.stderr if not done else sys.stdout)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
