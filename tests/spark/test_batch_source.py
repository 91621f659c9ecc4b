"""spark.read.format("trocket") against a real broker: what was produced comes back, ranges,
times, tags, splitting, data loss after retention, and clear errors."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.spark.spark_helpers import produce, wait_until


def read(spark, broker, **options):
    return spark.read.format("trocket").option("namesrv", broker.namesrv).options(**options).load()


def test_batch_read_returns_every_message_with_its_offsets_and_touches_no_group(spark, spark_broker):
    bodies = produce(spark_broker.namesrv, "SparkAll", 2000, tags="TagA")
    rows = read(spark, spark_broker, topic="SparkAll").collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    per_queue: dict[int, list[int]] = {}
    for row in rows:
        per_queue.setdefault(row.queueId, []).append(row.queueOffset)
        number = int(row.body[1:])
        assert row.keys == [f"k{number}"] and row.properties["n"] == str(number) and row.tags == "TagA"
        assert row.topic == "SparkAll" and row.brokerName == "broker-a" and len(row.msgId) == 32
        assert (
            row.uniqKey
            and row.storeTimestamp >= row.bornTimestamp
            and row.storeHost.endswith(spark_broker.broker.split(":")[1])
        )
    assert len(per_queue) == 4
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))
    progress = spark_broker.admin("consumerProgress", "-g", "TOOLS_CONSUMER", check=False)
    assert "SparkAll" not in progress.stdout
    assert progress.returncode != 0 and "has no progress" in progress.stderr


def test_offset_ranges_and_partition_splitting(spark, spark_broker):
    produce(spark_broker.namesrv, "SparkRange", 800, queue_id=0, batch=100)  # all in queue 0
    starting = json.dumps({"SparkRange": {"broker-a": {"0": 100}}})
    ending = json.dumps({"SparkRange": {"broker-a": {"0": 350}}})
    df = read(spark, spark_broker, topic="SparkRange", startingOffsets=starting, endingOffsets=ending)
    offsets = sorted(r.queueOffset for r in df.select("queueOffset").collect())
    assert offsets == list(range(100, 350))
    split = read(spark, spark_broker, topic="SparkRange", maxRecordsPerPartition="100")
    assert split.rdd.getNumPartitions() == 8
    assert split.count() == 800
    assert read(spark, spark_broker, topic="SparkRange", minPartitions="5").rdd.getNumPartitions() >= 5
    by_bytes = read(spark, spark_broker, topic="SparkRange", maxBytesPerPartition="16KiB")
    assert by_bytes.rdd.getNumPartitions() > 4 and by_bytes.count() == 800
    latest = read(spark, spark_broker, topic="SparkRange", startingOffsets="latest")
    assert latest.count() == 0


def test_timestamp_ranges_resolve_through_the_broker(spark, spark_broker):
    produce(spark_broker.namesrv, "SparkTime", 300, prefix="old")
    rows = read(spark, spark_broker, topic="SparkTime").collect()
    boundary = int(max(r.storeTimestamp for r in rows).timestamp() * 1000) + 1
    while time.time() * 1000 <= boundary + 5:
        time.sleep(0.01)
    produce(spark_broker.namesrv, "SparkTime", 200, prefix="new")
    after = read(spark, spark_broker, topic="SparkTime", startingTimestamp=str(boundary)).collect()
    assert sorted(r.body for r in after) == sorted(f"new{i}".encode() for i in range(200))
    before = read(spark, spark_broker, topic="SparkTime", endingTimestamp=str(boundary)).collect()
    assert sorted(r.body for r in before) == sorted(f"old{i}".encode() for i in range(300))


def test_tag_expression_and_topic_pattern(spark, spark_broker):
    produce(spark_broker.namesrv, "SparkTagsA", 100, prefix="a", tags="A")
    produce(spark_broker.namesrv, "SparkTagsA", 100, prefix="b", tags="B")
    produce(spark_broker.namesrv, "SparkTagsB", 50, prefix="c", tags="C")
    only_a = read(spark, spark_broker, topic="SparkTagsA", tagExpression="A").collect()
    assert sorted(r.body for r in only_a) == sorted(f"a{i}".encode() for i in range(100))
    both = read(spark, spark_broker, topicPattern="SparkTags[AB]")
    assert both.count() == 250
    assert sorted(r.topic for r in both.select("topic").distinct().collect()) == ["SparkTagsA", "SparkTagsB"]


def test_fail_on_data_loss_after_retention_deleted_a_file(spark, spark_broker):
    produce(spark_broker.namesrv, "SparkLoss", 9000, queue_id=0, batch=200, prefix="x" * 200)
    commitlog = Path(spark_broker.data_dir) / "commitlog"
    files = sorted(commitlog.iterdir())
    assert len(files) >= 3, files
    old = time.time() - 3 * 3600
    for path in files[:-1]:
        os.utime(path, (old, old))
    wait_until(lambda: not files[0].exists(), what="retention deleted the first commit-log file")
    wait_until(
        lambda: read(spark, spark_broker, topic="SparkLoss").count() < 9000, what="queue minimum moved"
    )
    from_zero = json.dumps({"SparkLoss": {"broker-a": {"0": 0}}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, spark_broker, topic="SparkLoss", startingOffsets=from_zero).collect()
    kept = read(spark, spark_broker, topic="SparkLoss", startingOffsets=from_zero, failOnDataLoss="false")
    offsets = sorted(r.queueOffset for r in kept.select("queueOffset").collect())
    assert 0 < offsets[0] and offsets == list(range(offsets[0], 9000))


def test_bad_options_fail_with_the_option_named(spark, spark_broker):
    with pytest.raises(Exception, match='"namesrv" is required'):
        spark.read.format("trocket").option("topic", "X").load().collect()
    with pytest.raises(Exception, match="topicPattern"):
        read(spark, spark_broker).collect()
    with pytest.raises(Exception, match="not a readable queue"):
        read(
            spark, spark_broker, topic="SparkAll", startingOffsets='{"SparkAll": {"broker-z": {"0": 1}}}'
        ).collect()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("trocket").schema("body binary").option("namesrv", spark_broker.namesrv).option(
            "topic", "SparkAll"
        ).load().collect()
    with pytest.raises(Exception, match="does not exist|cannot be read"):
        read(spark, spark_broker, topic="NoSuchTopicHere").collect()


def test_an_empty_topic_reads_as_no_rows(spark, spark_broker):
    spark_broker.admin("updateTopic", "-t", "SparkEmpty", "-c", "DefaultCluster")
    wait_until(
        lambda: read(spark, spark_broker, topic="SparkEmpty").count() == 0, what="empty topic readable"
    )
