"""Which master and driver address the job asks Spark for, and the one-line failures that stop it
before Spark's own minute-long retries and stack traces."""

import socket
import subprocess
import sys

import pytest

from dashboard import analytics
from dashboard.models import AnalyticsRun
from delayq_analytics.spark import (
    SMALL_INPUT_BYTES,
    MasterUnreachable,
    check_master,
    master_addresses,
    plan,
    tuning,
)
from tests.conftest import ROOT


def test_a_local_run_forces_nothing_but_binds_the_driver_to_loopback():
    chosen = plan(None, env={})
    assert chosen.master is None                   # spark-submit (launched by pyspark) picks: local[*]
    assert chosen.effective_master == "local[*]"
    assert chosen.driver_host == "127.0.0.1" and chosen.driver_memory == "2g" and chosen.starts_jvm


def test_under_spark_submit_the_submitted_master_and_memory_are_kept():
    chosen = plan(None, env={"PYSPARK_GATEWAY_PORT": "40123"})
    assert chosen.master is None and chosen.effective_master is None
    assert chosen.driver_host is None               # executors on other hosts must reach the driver
    assert not chosen.starts_jvm                    # the JVM is running: --driver-memory sizes it


def test_an_explicit_master_wins_even_under_spark_submit():
    assert plan("spark://m:7077", env={"PYSPARK_GATEWAY_PORT": "1"}).master == "spark://m:7077"
    assert plan(None, env={"SPARK_MASTER": "yarn"}).master == "yarn"
    assert plan("local[2]", env={"SPARK_MASTER": "yarn"}).master == "local[2]"


def test_a_cluster_master_gets_no_loopback_driver_unless_asked():
    assert plan("spark://m:7077", env={}).driver_host is None
    assert plan("spark://m:7077", env={"SPARK_LOCAL_IP": "10.0.0.5"}).driver_host == "10.0.0.5"
    assert plan("local[*]", env={"SPARK_LOCAL_IP": "10.0.0.5"}).driver_host == "10.0.0.5"


def test_spark_defaults_and_master_env_are_what_a_plain_run_uses(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text("# cluster\nspark.master   yarn\nspark.executor.memory 4g\n")
    chosen = plan(None, env={"SPARK_CONF_DIR": str(tmp_path)})
    assert chosen.master is None and chosen.effective_master == "yarn" and chosen.driver_host is None
    assert plan(None, env={"MASTER": "spark://m:7077"}).effective_master == "spark://m:7077"
    (tmp_path / "spark-defaults.conf").write_text("spark.master=k8s://https://api:443\n")
    assert plan(None, env={"SPARK_CONF_DIR": str(tmp_path)}).effective_master == "k8s://https://api:443"


def test_small_local_runs_are_tuned_for_start_up_and_large_or_cluster_runs_for_throughput():
    local, cluster = plan(None, env={}), plan("spark://m:7077", env={})
    partitions, options = tuning(local, SMALL_INPUT_BYTES - 1, env={})
    assert "TieredStopAtLevel=1" in options and int(partitions) <= 8
    for chosen, size in ((local, SMALL_INPUT_BYTES), (local, None), (cluster, 1)):
        partitions, options = tuning(chosen, size, env={})
        assert partitions == "16" and "TieredStopAtLevel" not in options
    assert tuning(local, 1, env={"DELAYQ_SPARK_SHUFFLE_PARTITIONS": "5"})[0] == "5"
    assert "log4j2.configurationFile" in tuning(local, 1, env={})[1]


def test_master_urls_list_every_standalone_master():
    assert master_addresses("spark://a:7077,b:7078") == [("a", 7077), ("b", 7078)]
    assert master_addresses("spark://a") == [("a", 7077)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]       # closed when the block ends: nothing listens there


def test_an_unreachable_master_is_one_line_naming_it():
    port = closed_port()
    with pytest.raises(MasterUnreachable, match=rf"spark://127.0.0.1:{port} is not reachable .*refused"):
        check_master(f"spark://127.0.0.1:{port}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_master(f"spark://127.0.0.1:{port},127.0.0.1:{listening.getsockname()[1]}")   # one of two is up
    check_master("yarn")      # not a standalone master: nothing to check here


def test_the_cli_says_an_unreachable_master_in_one_line(tmp_path):
    url = f"spark://127.0.0.1:{closed_port()}"
    done = subprocess.run([sys.executable, "-m", "delayq_analytics.run", "--archive", str(tmp_path), "--out",
                           str(tmp_path / "out"), "--master", url], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [f"error: the Spark master at {url} is not reachable "
                                                f"({url.removeprefix('spark://')}: Connection refused): start it, "
                                                f"or point --master / SPARK_MASTER at a running one"]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_dashboard_run_against_a_dead_master_ends_failed_with_that_line(settings, tmp_path, monkeypatch):
    settings.DELAYQ_ARCHIVE_DIR = str(tmp_path)
    monkeypatch.setenv("SPARK_MASTER", f"spark://127.0.0.1:{closed_port()}")
    run = analytics.execute(analytics.create_run(trigger="test").pk)
    assert run.status == AnalyticsRun.Status.FAILED and not run.active
    assert "is not reachable" in run.error and "SPARK_MASTER" in run.error


@pytest.mark.slow
def test_a_corrupt_archive_file_is_one_line_and_writes_nothing(tmp_path):
    from bench.pipeline import generate

    archive = tmp_path / "archive"
    generate(str(archive), 2_000)
    bad = next(archive.glob("date=*/topic=orders")) / "part-damaged.parquet"
    bad.write_bytes(b"not parquet at all\n")
    done = subprocess.run([sys.executable, "-m", "delayq_analytics.run", "--archive", str(archive), "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Using incubator modules")]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"error: the archive file {bad} is not readable Parquet")
    assert "move it out of" in lines[0]
    assert not (tmp_path / "out").exists()
