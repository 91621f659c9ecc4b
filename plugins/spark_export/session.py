"""A Spark session with the ``trocket`` source registered, set up the way the export job, the
benchmark and the tests all need it (one place for the settings the Spark notes call for)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any


def trocket_session(
    master: str = "local[*]",
    *,
    app_name: str = "trocket",
    driver_memory: str = "2g",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Start (or join) a session: workers run this interpreter unless ``PYSPARK_PYTHON`` says
    otherwise (they must import trocket), timestamps are UTC, the console progress bar and INFO
    logging are off. ``driver_memory`` only counts for the first session of a process (it sizes
    the JVM).

    :raises ImportError: pyspark, pyarrow or numpy is missing (the message says what to install).
    """
    from plugins.spark_export import register, spark_available

    problem = spark_available()
    if problem is not None:
        raise ImportError(problem)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
