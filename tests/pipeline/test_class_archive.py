"""The driver JVM's class-data archive: where it lives, what turns it off, how old ones go, and
that a run without one leaves one behind (written in the background) that the next JVM maps."""

import os
import subprocess
import sys
import time

import pyarrow.dataset as ds
import pytest

from delayq_analytics import class_archive
from delayq_analytics.spark import check_java, plan, tuning
from tests.conftest import ROOT


@pytest.mark.parametrize("value", ["off", "OFF", "0", "no", ""])
def test_the_archive_can_be_turned_off(value):
    assert class_archive.folder({class_archive.ENV: value}) is None
    assert class_archive.archive_path("openjdk version \"17\"", {class_archive.ENV: value}) is None


def test_the_archive_lives_in_the_user_cache_or_the_folder_named(tmp_path):
    assert class_archive.folder({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "delayq")
    assert class_archive.folder({class_archive.ENV: str(tmp_path / "x")}) == str(tmp_path / "x")


def test_the_name_follows_java_and_spark_and_ignores_picked_up_options(tmp_path, monkeypatch):
    env = {class_archive.ENV: str(tmp_path)}
    one = class_archive.archive_path('openjdk version "17.0.15" 2025-04-15', env)
    assert one == class_archive.archive_path('openjdk version "17.0.15" 2025-04-15', env)
    assert one != class_archive.archive_path('openjdk version "21.0.2" 2024-01-16', env)
    assert os.path.basename(one).startswith(class_archive.PREFIX) and one.endswith(".jsa")
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xss2m")   # the JVM then prints "Picked up ..." first
    assert 'version "' in check_java()


def test_the_jvm_options_carry_the_archive_and_keep_stdout_clean():
    _, options = tuning(plan("local[*]", env={}), None, env={}, extra_options="-XX:SharedArchiveFile=/x.jsa")
    assert "-XX:SharedArchiveFile=/x.jsa" in options.split()
    assert "-Xlog:all=warning:stderr" in options.split()     # --progress json owns stdout


def test_tidying_removes_unused_archives_and_dead_builders_leftovers(tmp_path):
    mine = tmp_path / f"{class_archive.PREFIX}aaaa.jsa"
    recent, unused = tmp_path / f"{class_archive.PREFIX}bbbb.jsa", tmp_path / f"{class_archive.PREFIX}cccc.jsa"
    fresh_tmp, stale_tmp = tmp_path / f"{mine.name}.1.tmp", tmp_path / f"{class_archive.PREFIX}dddd.jsa.2.tmp"
    other = tmp_path / "notes.txt"
    for path in (recent, unused, fresh_tmp, stale_tmp, other):
        path.write_text("x")
    old = time.time() - class_archive.UNUSED_S - 60
    os.utime(unused, (old, old))
    os.utime(stale_tmp, (old, old))
    class_archive._tidy(str(mine))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([recent.name, fresh_tmp.name, other.name])


def test_one_builder_at_a_time(tmp_path):
    path = str(tmp_path / f"{class_archive.PREFIX}eeee.jsa")
    assert class_archive._take_lock(path)
    assert not class_archive._take_lock(path)           # a second run does not start a second builder
    stale = time.time() - class_archive.STALE_S - 60
    os.utime(f"{path}.lock", (stale, stale))
    assert class_archive._take_lock(path)               # the lock of a builder that died expires


def _job(archive, out, env):
    return subprocess.run([sys.executable, "-m", "delayq_analytics.run", "--archive", str(archive), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_a_run_without_an_archive_leaves_one_that_the_next_jvm_maps(tmp_path):
    from bench.pipeline import generate

    archive = tmp_path / "archive"
    generate(str(archive), 2_000)
    cache = tmp_path / "cache"
    env = {**os.environ, class_archive.ENV: str(cache), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    first = _job(archive, tmp_path / "out1", env)
    assert first.returncode == 0, first.stderr[-3000:]
    # The run returned without writing the archive; a detached builder writes it.
    deadline = time.monotonic() + 400
    built = None
    while time.monotonic() < deadline:
        found = [p for p in cache.iterdir() if p.suffix == ".jsa"] if cache.exists() else []
        if found and not any(p.suffix == ".lock" for p in cache.iterdir()):
            built = found[0]
            break
        time.sleep(1)
    assert built is not None, f"no archive in {cache} after 400 s: {list(cache.iterdir()) if cache.exists() else []}"
    assert built.stat().st_size > 10 * 2**20
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]
    # -Xshare:on makes a JVM that cannot map the archive refuse to start: this run used it.
    second = _job(archive, tmp_path / "out2", {**env, "JAVA_TOOL_OPTIONS": "-Xshare:on"})
    assert second.returncode == 0, second.stderr[-3000:]
    assert sorted(p.name for p in cache.iterdir()) == [built.name]    # no second builder
    for name in ("minute_counts", "timings", "attempts", "error_groups"):
        rows = [sorted(ds.dataset(str(out / name), partitioning="hive").to_table().to_pylist(), key=repr)
                for out in (tmp_path / "out1", tmp_path / "out2")]
        assert rows[0] == rows[1] and rows[0], name
