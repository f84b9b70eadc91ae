import logging
import os
import sys
import time

import pytest


@pytest.fixture(scope="session")
def spark():
    """One local[1] Spark session for the pipeline tests (starting Spark costs seconds)."""
    # collect() turns timestamps into naive datetimes in the process's zone: make that UTC too.
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("DELAYQ_SPARK_SHUFFLE_PARTITIONS", "2")
    from delayq_analytics.spark import session

    spark = session("local[1]", app="delayq-tests")
    yield spark
    spark.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)   # its __del__ logs after pytest closed stderr
