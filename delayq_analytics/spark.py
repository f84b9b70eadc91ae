"""Starting Spark: one place for the session settings and the Java check."""

import os
import re
import shutil
import subprocess
import sys

JAVA_HELP = ("install Java 17 or newer (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`; "
             "macOS: `brew install openjdk@17`) or set JAVA_HOME to an existing JDK")


class JavaMissing(RuntimeError):
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
    return out.splitlines()[0] if out else java


def session(master: str | None = None, app: str = "delayq-analytics"):
    """A SparkSession: ``master`` or $SPARK_MASTER or local[*]; UTC everywhere; small shuffles,
    because one machine's job over days of events gains nothing from 200 partitions."""
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SPARK_MASTER") or "local[*]"
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", os.environ.get("DELAYQ_SPARK_SHUFFLE_PARTITIONS", "16"))
               .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
               # Readable as UTC instants by pyarrow (the dashboard's loader); INT96 is not.
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.driver.memory", os.environ.get("DELAYQ_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
               .config("spark.driver.bindAddress", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
