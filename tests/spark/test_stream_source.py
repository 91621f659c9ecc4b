"""spark.readStream.format("trocket"): rate limits, AvailableNow, resuming from the checkpoint,
new queues, progress committed to a group for monitoring, and a query killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.interop.conftest import subprocess_env
from tests.spark.spark_helpers import produce, wait_until


def start_available_now(spark, broker, topic: str, out: Path, **options):
    """An AvailableNow query from ``topic`` into Parquet under ``out``, started."""
    stream = (
        spark.readStream.format("trocket")
        .option("namesrv", broker.namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    return query


def run_available_now(spark, broker, topic: str, out: Path, **options) -> list[int]:
    """One AvailableNow run into Parquet; returns the rows of each micro-batch."""
    query = start_available_now(spark, broker, topic, out, **options)
    query.awaitTermination()
    assert query.exception() is None
    return [p.numInputRows for p in query.recentProgress if p.numInputRows]


def bodies_in(spark, path: Path) -> list[bytes]:
    return [r.body for r in spark.read.parquet(str(path)).select("body").collect()]


def test_max_offsets_per_trigger_resume_and_group_progress(spark, spark_broker, tmp_path):
    first = produce(spark_broker.namesrv, "SparkStream", 1000, prefix="a")
    batches = run_available_now(
        spark,
        spark_broker,
        "SparkStream",
        tmp_path,
        maxOffsetsPerTrigger="300",
        commitOffsetsToGroup="spark-monitor",
    )
    assert sum(batches) == 1000 and max(batches) <= 300 and len(batches) >= 4
    assert sorted(bodies_in(spark, tmp_path / "data")) == sorted(first)
    progress = spark_broker.admin_json("consumerProgress", "-g", "spark-monitor")
    mine = [row for row in progress if row["#Topic"] == "SparkStream"]
    assert len(mine) == 4 and all(row["#Diff"] == 0 for row in mine)

    second = produce(spark_broker.namesrv, "SparkStream", 200, prefix="b")
    again = run_available_now(spark, spark_broker, "SparkStream", tmp_path, maxOffsetsPerTrigger="300")
    assert sum(again) == 200
    assert run_available_now(spark, spark_broker, "SparkStream", tmp_path) == []
    assert sorted(bodies_in(spark, tmp_path / "data")) == sorted(first + second)


def test_queues_added_to_a_topic_are_read_from_their_start(spark, spark_broker, tmp_path):
    spark_broker.admin("updateTopic", "-t", "SparkGrow", "-c", "DefaultCluster", "-r", "2", "-w", "2")
    first = produce(spark_broker.namesrv, "SparkGrow", 100, prefix="a", batch=10)
    assert sum(run_available_now(spark, spark_broker, "SparkGrow", tmp_path)) == 100
    spark_broker.admin("updateTopic", "-t", "SparkGrow", "-c", "DefaultCluster", "-r", "4", "-w", "4")
    wait_until(lambda: _queues(spark_broker, "SparkGrow") == 4, what="topic scaled to 4 queues")
    added = produce(spark_broker.namesrv, "SparkGrow", 40, prefix="n", batch=10, queue_id=3)
    assert sum(run_available_now(spark, spark_broker, "SparkGrow", tmp_path)) == 40
    rows = spark.read.parquet(str(tmp_path / "data")).select("body", "queueId").collect()
    assert sorted(r.body for r in rows) == sorted(first + added)
    assert {r.queueId for r in rows if r.body.startswith(b"n")} == {3}


def _queues(broker, topic: str) -> int:
    return len(broker.admin_json("topicStatus", "-t", topic))


def test_streaming_export_killed_mid_stream_restarts_exactly_once(spark, spark_broker, tmp_path):
    bodies = produce(spark_broker.namesrv, "SparkKill", 6000, prefix="k", batch=100)
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "export.log"
    command = [
        sys.executable, "-m", "trocket", "export", "-n", spark_broker.namesrv, "--topic", "SparkKill",
        "--to", "parquet", str(out), "--stream", "--checkpoint", str(checkpoint), "--master", "local[2]",
        "--max-offsets-per-trigger", "500", "--from", "earliest",
    ]  # fmt: skip
    env = subprocess_env() | {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("w") as sink:
        job = subprocess.Popen([*command, "--continuous"], stdout=sink, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)  # fmt: skip
    try:
        wait_until(lambda: len(list((checkpoint / "commits").glob("[0-9]*"))) >= 2, timeout=180,
                   what="two micro-batches committed")  # fmt: skip
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
    committed = len(list((checkpoint / "commits").glob("[0-9]*")))
    assert committed * 500 < 6000, "the query finished before it was killed; nothing was tested"
    time.sleep(0.5)
    rerun = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "export:" in rerun.stdout and "batch" in rerun.stdout
    exported = bodies_in(spark, out)
    assert len(exported) == 6000 and sorted(exported) == sorted(bodies)


def test_queues_that_disappear_fail_the_query_or_are_skipped_per_fail_on_data_loss(
    spark, spark_broker, tmp_path
):
    produce(spark_broker.namesrv, "SparkGone", 100)
    assert sum(run_available_now(spark, spark_broker, "SparkGone", tmp_path)) == 100
    spark_broker.admin("deleteTopic", "-t", "SparkGone", "-c", "DefaultCluster")
    query = start_available_now(spark, spark_broker, "SparkGone", tmp_path)
    with pytest.raises(Exception, match="are gone") as failed:
        query.awaitTermination()
    assert "failOnDataLoss=false" in str(failed.value)
    assert run_available_now(spark, spark_broker, "SparkGone", tmp_path, failOnDataLoss="false") == []
    assert len(bodies_in(spark, tmp_path / "data")) == 100


def test_min_offsets_per_trigger_waits_for_enough_messages(spark, spark_broker, tmp_path):
    produce(spark_broker.namesrv, "SparkMin", 100, prefix="a")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # progress for idle triggers too
    query = (
        spark.readStream.format("trocket")
        .option("namesrv", spark_broker.namesrv)
        .option("topic", "SparkMin")
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "150")
        .option("maxTriggerDelay", "1h")
        .load()
        .writeStream.format("memory")
        .queryName("spark_min")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(query.recentProgress) >= 5, what="five triggers")
        assert spark.sql("select count(*) from spark_min").first()[0] == 0
        produce(spark_broker.namesrv, "SparkMin", 100, prefix="b")
        try:
            wait_until(
                lambda: spark.sql("select count(*) from spark_min").first()[0] == 200, what="one batch of 200"
            )
        except AssertionError as waited:  # say whether the query died, and of what
            state = "running" if query.isActive else f"stopped: {query.exception()}"
            progress = query.lastProgress
            raise AssertionError(f"{waited}; the query is {state}; last progress {progress}") from None
    finally:
        query.stop()
    assert (
        sum(run_available_now(spark, spark_broker, "SparkMin", tmp_path, minOffsetsPerTrigger="100000"))
        == 200
    )
