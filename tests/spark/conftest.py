"""One real broker and one local Spark session (``local[2,2]``: two cores, one task retry) for
the Spark tests. The tests skip only when Java is missing; pyspark is installed by ``./run tests``."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest

from tests.interop.conftest import RunningBroker, start_broker

STORE = """
commit_log_file_size = "1MiB"      # small files, so retention can delete one
file_reserved_time = "1h"
delete_when = "00;01;02;03;04;05;06;07;08;09;10;11;12;13;14;15;16;17;18;19;20;21;22;23"
clean_interval = "500ms"
# Deletion by disk use would make these tests depend on how full the machine's disk is (a CI
# disk past 85 % deletes unexpired files); the store's own tests cover it with a fixed ratio.
disk_max_used_space_ratio = 95
disk_space_clean_forcibly_ratio = 100
clean_file_forcibly_enable = false
"""


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if shutil.which("java") is None:
        pytest.skip("Java is not installed: Spark needs Java 17 or newer on PATH")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("TZ", "UTC")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from plugins.spark_export.session import trocket_session

    session = trocket_session(
        "local[2,2]",
        app_name="trocket-tests",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
        },
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path_factory.mktemp("spark-broker"), store=STORE)
    try:
        yield running
    finally:
        running.stop()
