"""Starting Spark: one place for the session settings, the Java check and the master check.

Who picks the master: the user (``--master`` or ``$SPARK_MASTER``) when they gave one; otherwise
whatever launched us. Under ``spark-submit`` that is its ``--master`` (or spark-defaults.conf, YARN,
Kubernetes); started as ``python -m delayq_analytics.run`` pyspark launches spark-submit itself,
which reads spark-defaults.conf and ``$MASTER`` and falls back to ``local[*]``. Forcing a master in
the builder would override all of those and silently run a cluster submit in local mode.

Where the driver listens: loopback is right for a local master only (executors are threads of the
driver). For a cluster, executors on other hosts connect back to the driver, so it keeps Spark's
own choice (the host's name) unless ``SPARK_LOCAL_IP`` says otherwise.

Start-up: when the job starts the driver JVM itself, it starts it from a class-data archive when
one exists (see delayq_analytics.class_archive).
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

JAVA_HELP = ("install Java 17 or newer (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`; "
             "macOS: `brew install openjdk@17`) or set JAVA_HOME to an existing JDK")
LOOPBACK = "127.0.0.1"
MASTER_CONNECT_TIMEOUT_S = 3.0
SETTLE_TIMEOUT_S = 10.0
# Below this much archive, a run is mostly JVM warm-up, not data: the JIT's quick tier only (C1)
# and a few shuffle partitions cut a 200,000-event run from ~41 s to ~29 s here, while a
# 10,000,000-event run is faster with the full JIT and 16 partitions (69-75 s against 77 s).
SMALL_INPUT_BYTES = 32 * 2**20
SMALL_INPUT_PARTITIONS_MAX = 4
SCAN_TASKS_PER_CORE = 4
# spark-defaults.conf is a Java properties file: "key value", "key=value" or "key: value".
DEFAULTS_MASTER = re.compile(r"^\s*spark\.master\s*[=:\s]\s*(\S+)")
LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
# The JVM's own warnings (class archive mismatches, classes it cannot archive) go to stderr, never
# to stdout, where --progress json writes the lines the dashboard parses.
JVM_LOG_OPTIONS = "-Xlog:disable -Xlog:all=warning:stderr -Xlog:cds*=off:stderr"
# The throughput collector: one batch job, no pause goals. Measured on 2 cores over 10,000,000
# events, in alternating runs, the job took 34-36 s with it against 37-40 s with the default G1,
# whose concurrent threads and write barriers compete with the tasks for the cores. It keeps
# more of the heap (driver memory) resident: ~2.8 GiB peak against ~1.6 GiB.
GC_OPTIONS = "-XX:+UseParallelGC"


class JavaMissing(RuntimeError):
    pass


class MasterUnreachable(RuntimeError):
    pass


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def check_java() -> str:
    """Return the Java version string, or raise JavaMissing saying how to install it. Spark
    itself fails with a long, unhelpful trace when java is absent."""
    java = java_binary()
    if java is None:
        raise JavaMissing(f"the analytics job runs on Spark, which needs Java: no `java` on PATH and no "
                          f"JAVA_HOME; {JAVA_HELP}")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    match = re.search(r'version "(\d+)', out)
    if match and int(match.group(1)) < 17:
        raise JavaMissing(f"{java} is Java {match.group(1)}; Spark 4 needs Java 17 or newer: {JAVA_HELP}")
    # The version line, not the first: JAVA_TOOL_OPTIONS makes the JVM print "Picked up ..." first.
    return next((line for line in out.splitlines() if 'version "' in line), out.splitlines()[0] if out else java)


def under_spark_submit(env=os.environ) -> bool:
    """spark-submit starts the JVM first and hands the Python driver its gateway."""
    return "PYSPARK_GATEWAY_PORT" in env


def defaults_master(env=os.environ) -> str | None:
    """spark.master from spark-defaults.conf, as the spark-submit that pyspark launches reads it."""
    conf_dir = env.get("SPARK_CONF_DIR") or (os.path.join(env["SPARK_HOME"], "conf") if env.get("SPARK_HOME") else None)
    if not conf_dir:
        return None
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf")) as fh:
            for line in fh:
                if match := DEFAULTS_MASTER.match(line):
                    return match.group(1)
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class Plan:
    """What the builder sets. ``master`` None: leave it to the launcher. ``effective_master``: the
    master the job will run on, when it can be known before Spark starts (None under spark-submit
    without an explicit one). ``driver_host`` None: Spark's own choice. ``starts_jvm``: the
    session starts the JVM, so JVM settings (driver memory, Java options) still take effect;
    under spark-submit the JVM is running already and --driver-memory is the way there."""
    master: str | None
    effective_master: str | None
    driver_host: str | None
    driver_memory: str
    starts_jvm: bool


def is_local(master: str | None) -> bool:
    return master is not None and master.startswith("local")


def plan(master: str | None = None, env=os.environ) -> Plan:
    explicit = master or env.get("SPARK_MASTER") or None
    submitted = under_spark_submit(env)
    if explicit:
        effective = explicit
    elif submitted:
        effective = None
    else:
        effective = defaults_master(env) or env.get("MASTER") or "local[*]"
    host = env.get("SPARK_LOCAL_IP") or (LOOPBACK if is_local(effective) else None)
    return Plan(explicit, effective, host, env.get("DELAYQ_SPARK_DRIVER_MEMORY", "2g"), starts_jvm=not submitted)


def tuning(chosen: Plan, input_bytes: int | None, env=os.environ,
           extra_options: str = "") -> tuple[str, str]:
    """(shuffle partitions, driver JVM options): tuned for start-up on a small local run."""
    small = input_bytes is not None and input_bytes < SMALL_INPUT_BYTES and is_local(chosen.effective_master)
    partitions = env.get("DELAYQ_SPARK_SHUFFLE_PARTITIONS") or (str(min(os.cpu_count() or 2, SMALL_INPUT_PARTITIONS_MAX)) if small else "16")
    options = [f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}", JVM_LOG_OPTIONS, GC_OPTIONS]
    if small:
        options.append("-XX:TieredStopAtLevel=1")
    if extra_options:
        options.append(extra_options)
    return partitions, " ".join(options)


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a standalone master URL (``spark://h1:7077,h2:7077`` for HA)."""
    rest = master.removeprefix("spark://")
    out = []
    for part in rest.split(","):
        parsed = urlsplit(f"spark://{part}")
        out.append((parsed.hostname or part, parsed.port or 7077))
    return out


def check_master(master: str | None, timeout: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """For a standalone master, one connection attempt per listed master before Spark starts:
    Spark itself retries an unreachable master for about a minute and then prints ~200 lines."""
    if not master or not master.startswith("spark://"):
        return
    reasons = []
    for host, port in master_addresses(master):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    raise MasterUnreachable(f"the Spark master at {master} is not reachable ({'; '.join(reasons)}): start it, or "
                            f"point --master / SPARK_MASTER at a running one")


_missing_archive: str | None = None   # the class archive this run could not start from, for stop()


def session(master: str | None = None, app: str = "delayq-analytics", input_bytes: int | None = None,
            class_archive: bool = False, jvm_options: str = ""):
    """A SparkSession on the master chosen by ``plan()``; UTC everywhere; small shuffles, because
    one machine's job over days of events gains nothing from 200 partitions. ``input_bytes``
    (when known) tunes a local run over a small archive for start-up rather than throughput.
    ``class_archive``: start the driver JVM from the class-data archive (the CLI does; it ends
    with ``stop()``, which has the archive written in the background when there was none).
    ``jvm_options``: more options for a driver JVM this session starts."""
    global _missing_archive
    java_version = check_java()
    chosen = plan(master)
    check_master(chosen.effective_master)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if chosen.driver_host:
        os.environ.setdefault("SPARK_LOCAL_IP", chosen.driver_host)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if chosen.master:
        builder = builder.master(chosen.master)
    if class_archive and chosen.starts_jvm:
        from delayq_analytics import class_archive as classes

        path = classes.archive_path(java_version)
        if path and os.path.isfile(path):
            jvm_options = f"{classes.start_options(path)} {jvm_options}".strip()
        else:
            _missing_archive = path
    partitions, java_options = tuning(chosen, input_bytes, extra_options=jvm_options)
    if chosen.starts_jvm:
        builder = (builder.config("spark.driver.memory", chosen.driver_memory)
                   .config("spark.driver.extraJavaOptions", java_options))
    if chosen.driver_host:
        builder = (builder.config("spark.driver.host", chosen.driver_host)
                   .config("spark.driver.bindAddress", chosen.driver_host))
    if is_local(chosen.effective_master):
        # Scans in at least SCAN_TASKS_PER_CORE tasks per core: Spark's default of one split per
        # core left 3 tasks for 2 cores, the third running alone. (On a cluster Spark's default,
        # one per executor core, is left alone: this host's cores say nothing about those.)
        builder = builder.config("spark.sql.files.minPartitionNum", str(SCAN_TASKS_PER_CORE * (os.cpu_count() or 2)))
    builder = (builder.config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", partitions)
               .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
               # Readable as UTC instants by pyarrow (the dashboard's loader); INT96 is not.
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def settle(spark, timeout: float = SETTLE_TIMEOUT_S) -> None:
    """Cancel what still runs and wait (up to ``timeout``) until no task runs. After a failed
    job, tasks of stages running beside the failed one are being killed; stopping Spark under
    them makes them log stack traces (a result for a closed scheduler, a broadcast already
    removed) after the one line that says what went wrong."""
    context = spark.sparkContext
    context.cancelAllJobs()
    # The JVM's tracker: its executor view counts tasks still running in stages already marked
    # failed or cancelled, which pyspark's (active stages only) no longer lists.
    tracker = context._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(info.numRunningTasks() for info in tracker.getExecutorInfos()) == 0:
            return
        time.sleep(0.05)


def stop(spark) -> None:
    """Stop the session once no task runs; when it started without a class-data archive it could
    have used, have one written in the background for the next runs."""
    global _missing_archive
    settle(spark)
    spark.stop()
    path, _missing_archive = _missing_archive, None
    if path:
        from delayq_analytics import class_archive as classes

        classes.build_in_background(path)
