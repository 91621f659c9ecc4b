"""df.write.format("trocket") and the streaming sink, and the export job's Parquet output."""

from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from plugins.spark_export.export_job import ExportSpec, run_export
from tests.spark.spark_helpers import produce


def read(spark, broker, topic):
    return spark.read.format("trocket").option("namesrv", broker.namesrv).option("topic", topic).load()


def test_batch_sink_round_trip(spark, spark_broker):
    rows = [
        ("SparkSinkA", f"body{i}".encode(), f"T{i % 2}", [f"key{i}", "shared"], {"n": str(i)}, i % 4)
        for i in range(500)
    ]
    df = spark.createDataFrame(
        rows,
        "topic string, body binary, tags string, keys array<string>, "
        "properties map<string,string>, queueId int",
    )
    df.write.format("trocket").option("namesrv", spark_broker.namesrv).mode("append").save()
    back = read(spark, spark_broker, "SparkSinkA").collect()
    assert len(back) == 500
    for row in back:
        i = int(row.body[4:])
        assert row.tags == f"T{i % 2}" and row.keys == [f"key{i}", "shared"] and row.properties["n"] == str(i)
        assert row.queueId == i % 4


def test_streaming_sink_copies_a_topic_and_the_topic_option_wins(spark, spark_broker, tmp_path):
    bodies = produce(spark_broker.namesrv, "SparkCopyFrom", 300, prefix="c")
    source = (
        spark.readStream.format("trocket")
        .option("namesrv", spark_broker.namesrv)
        .option("topic", "SparkCopyFrom")
        .option("startingOffsets", "earliest")
        .load()
        .select("topic", "body", "tags")
    )
    query = (
        source.writeStream.format("trocket")
        .option("namesrv", spark_broker.namesrv)
        .option("topic", "SparkCopyTo")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    copied = read(spark, spark_broker, "SparkCopyTo").collect()
    assert sorted(r.body for r in copied) == sorted(bodies)


def test_sink_errors_are_clear(spark, spark_broker):
    writer = spark.createDataFrame([("x",)], "name string").write.format("trocket")
    with pytest.raises(Exception, match='needs a "body" column'):
        writer.option("namesrv", spark_broker.namesrv).option("topic", "SparkSinkBad").mode("append").save()
    good = spark.createDataFrame([("SparkSinkBad", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match="only appends"):
        good.write.format("trocket").option("namesrv", spark_broker.namesrv).mode("overwrite").save()
    too_big = spark.createDataFrame([("SparkSinkBad", b"x" * (5 * 1024 * 1024))], "topic string, body binary")
    with pytest.raises(Exception, match="task partition"):
        too_big.write.format("trocket").option("namesrv", spark_broker.namesrv).mode("append").save()


def test_export_job_writes_parquet_readable_by_pyarrow_and_spark_and_resumes(
    spark, spark_broker, tmp_path, capsys
):
    first = produce(spark_broker.namesrv, "SparkExport", 700, prefix="e")
    out = tmp_path / "export"
    spec = ExportSpec(namesrv=(spark_broker.namesrv,), output=out, topics=("SparkExport",), start="earliest")
    result = run_export(spec, session=spark)
    assert result.rows == 700
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("body").to_pylist()) == sorted(first)
    assert set(table.column("topic").to_pylist()) == {"SparkExport"}
    assert table.column("date").to_pylist()[0] is not None
    assert spark.read.parquet(str(out)).count() == 700
    printed = capsys.readouterr().out
    assert "700 messages" in printed and "next run: --from" in printed

    second = produce(spark_broker.namesrv, "SparkExport", 50, prefix="f")
    resumed = run_export(
        ExportSpec(
            namesrv=(spark_broker.namesrv,), output=out, topics=("SparkExport",), start=result.offsets
        ),
        session=spark,
    )
    assert resumed.rows == 50
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("body").to_pylist()) == sorted(first + second)
    runs = sorted((out / "_trocket_export").glob("*.json"))
    assert len(runs) == 2 and json.loads(runs[-1].read_text())["rows"] == 50
