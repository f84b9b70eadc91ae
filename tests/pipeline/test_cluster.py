"""The analytics job on a real standalone Spark cluster (master + worker started from the installed
pyspark): the README's spark-submit command and the CLI's --master each register an application
with the master and write outputs equal, row for row, to a local run's."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from bench.pipeline import generate
from delayq_analytics.run import OUTPUTS, run
from queue_core.localserver import free_port
from tests.conftest import readme_snippet

pytestmark = pytest.mark.slow
VENV_BIN = Path(sys.executable).parent
READY_S = 90


def spark_class() -> str:
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def master_state(web_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as resp:
        return json.load(resp)


def start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    # Own process group: spark-class execs java, and the worker forks executors we stop with it.
    return subprocess.Popen([spark_class(), *args], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and one 2-core worker on loopback, free ports; both stopped by PID afterwards."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    port, web, worker_web = free_port(), free_port(), free_port()
    master = start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                    "--webui-port", str(web)], logs / "master.log")
    worker = None
    try:
        url = f"spark://127.0.0.1:{port}"
        worker = start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port",
                        str(worker_web), "--cores", "2", "--memory", "2g", "--work-dir", str(logs / "work"), url],
                       logs / "worker.log")
        deadline = time.monotonic() + READY_S
        while True:
            try:
                if master_state(web)["aliveworkers"] == 1:
                    break
            except OSError:
                pass
            assert master.poll() is None and worker.poll() is None, (logs / "master.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the standalone master and worker did not come up"
            time.sleep(0.5)
        yield url, web
    finally:
        for proc in (worker, master):
            if proc is not None:
                stop(proc)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    generate(str(root), 20_000)
    return root


def rows(out: Path) -> dict[str, list]:
    """Every output's rows, sorted, for a row-for-row comparison."""
    result = {}
    for name in OUTPUTS:
        table = ds.dataset(out / name, format="parquet", partitioning="hive").to_table().to_pylist()
        result[name] = sorted(json.dumps(r, sort_keys=True, default=str) for r in table)
    return result


def applications(web: int) -> dict[str, str]:
    """Every application the master has seen: id -> name."""
    state = master_state(web)
    return {app["id"]: app["name"] for app in state["activeapps"] + state["completedapps"]}


def job_env() -> dict:
    return {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable}


def test_readme_submit_and_cli_master_run_on_the_cluster(cluster, archive, spark, tmp_path):
    url, web = cluster
    run(spark, str(archive), str(tmp_path / "local"))
    local = rows(tmp_path / "local")
    assert sum(len(v) for v in local.values()) > 100

    command = readme_snippet("cluster-submit", "sh").strip()
    command = (command.replace("spark://HOST:7077", url).replace("/srv/delayq/.venv/bin/python", sys.executable)
               .replace("/mnt/delayq/archive", shlex.quote(str(archive)))
               .replace("/mnt/delayq/analytics", shlex.quote(str(tmp_path / "submitted"))))
    before = applications(web)
    submitted = subprocess.run(["bash", "-c", command], env=job_env(), capture_output=True, text=True, timeout=300)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    after_submit = applications(web)
    assert [after_submit[i] for i in after_submit.keys() - before.keys()] == ["delayq-analytics"]
    assert rows(tmp_path / "submitted") == local

    cli = subprocess.run([str(VENV_BIN / "delayq-analytics"), "--master", url, "--archive", str(archive),
                          "--out", str(tmp_path / "cli")], env=job_env(), capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    after_cli = applications(web)
    assert [after_cli[i] for i in after_cli.keys() - after_submit.keys()] == ["delayq-analytics"]
    assert rows(tmp_path / "cli") == local
