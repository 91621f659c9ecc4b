"""The parts of spark_export that need no Spark session: bulk decoding against the SDK's
decoder, range splitting, rate-limit proration, option errors, and life without pyspark."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.errors import CorruptRecord
from kernel.model import Message, MessageQueue
from plugins.spark_export.arrow_records import to_record_batch
from plugins.spark_export.catalog import QueueKey
from plugins.spark_export.options import SparkOptionError, parse_source_options
from plugins.spark_export.ranges import QueueRange, SplitRules, prorate, split
from plugins.spark_export.schema import ARROW_SCHEMA, spark_schema
from tests.interop.conftest import subprocess_env
from trocket.client.consumer.received import decode_pulled
from wire.record import encode_record


def records(count: int, *, compressed_every: int = 0) -> bytes:
    out = []
    for i in range(count):
        body, sys_flag = f"body-{i}".encode() * 3, 0
        if compressed_every and i % compressed_every == 0:
            body, sys_flag = zlib.compress(b"z" * 5000), 1
        properties = {"TAGS": f"t{i % 3}", "KEYS": f"k{i} other", "UNIQ_KEY": f"U{i:030d}", "é": "ü"}
        born = ("10.1.2.3", 4000 + i % 2)
        message = Message("T", body, queue_id=1, properties=properties, sys_flag=sys_flag,
                          born_timestamp=1_700_000_000_000 + i, born_host=born)  # fmt: skip
        out.append(
            encode_record(message, queue_offset=i, physical_offset=i * 300, store_timestamp=1_700_000_000_500)
        )
    return b"".join(out)


def test_bulk_decoding_matches_the_sdk_decoder_field_for_field():
    data = records(500, compressed_every=97)
    batch = to_record_batch([data], "T", "broker-a")
    assert batch.schema == ARROW_SCHEMA
    expected = decode_pulled(data, MessageQueue("T", "broker-a", 1))
    for row, message in zip(batch.to_pylist(), expected, strict=True):
        assert row["body"] == message.body and dict(row["properties"]) == message.properties
        assert row["msgId"] == message.offset_msg_id and row["uniqKey"] == message.unique_key
        assert row["tags"] == message.tags and row["keys"] == message.properties["KEYS"].split(" ")
        assert row["bornHost"] == message.born_host and row["storeHost"] == message.store_host
        assert (
            row["queueOffset"] == message.queue_offset and row["commitLogOffset"] == message.commit_log_offset
        )
        assert int(row["bornTimestamp"].timestamp() * 1000) == message.born_timestamp
        assert row["sysFlag"] == message.sys_flag and row["queueId"] == 1 and row["brokerName"] == "broker-a"


@pytest.mark.parametrize("broken_utf8", [False, True])
def test_odd_property_texts_decode_as_the_sdk_decodes_them(broken_utf8):
    """Items without a separator, empty items, values holding \\x01, and (in one batch) bytes
    that are not UTF-8, which the map holds as replacement characters as the SDK does."""
    texts = [b"TAGS\x01a\x02", b"\x02\x02KEYS\x01k1 k2\x02junk\x02X\x01y\x01z", b"", b"A\x01"]
    if broken_utf8:
        texts.append(b"TAGS\x01\xff\xfe\x02N\x01\xc3")
    data = b"".join(_record_with_properties(text, i) for i, text in enumerate(texts))
    batch = to_record_batch([data], "T", "b")
    expected = decode_pulled(data, MessageQueue("T", "b", 1))
    assert [dict(row) for row in batch.column("properties").to_pylist()] == [m.properties for m in expected]
    assert batch.column("tags").to_pylist() == [m.tags for m in expected]


def _record_with_properties(text: bytes, index: int) -> bytes:
    """A stored record whose properties are ``text`` as is (the encoder would refuse some)."""
    record = bytearray(encode_record(Message("T", b"body"), queue_offset=index, physical_offset=index * 200,
                                     store_timestamp=1))  # fmt: skip
    props_at = len(record) - 2  # no properties: the record ends with their 2-byte length
    record[props_at:] = len(text).to_bytes(2, "big") + text
    record[0:4] = len(record).to_bytes(4, "big")
    return bytes(record)


def test_decoding_trims_to_the_range_and_filters_tags_exactly():
    batch = to_record_batch([records(60)], "T", "b", start=10, end=40, tags=frozenset({"t1"}))
    assert batch.column("queueOffset").to_pylist() == [i for i in range(10, 40) if i % 3 == 1]


def test_a_damaged_record_is_refused_not_returned():
    data = bytearray(records(3))
    data[len(records(1)) + 4] ^= 0xFF  # the second record's magic
    with pytest.raises(CorruptRecord):
        to_record_batch([bytes(data)], "T", "b")
    with pytest.raises(CorruptRecord):
        to_record_batch([records(2)[:-5]], "T", "b")


def test_the_arrow_schema_is_what_spark_checks_the_first_batch_against():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC") == ARROW_SCHEMA


def queue_range(queue: int, start: int, end: int) -> QueueRange:
    return QueueRange(QueueKey("T", "b", queue), "127.0.0.1:1", start, end)


def test_split_rules():
    ranges = [queue_range(0, 0, 1000), queue_range(1, 50, 60), queue_range(2, 5, 5)]
    by_records = split(ranges, SplitRules(max_records=300))
    assert [(r.key.queue_id, r.start, r.end) for r in by_records] == [
        (0, 0, 250), (0, 250, 500), (0, 500, 750), (0, 750, 1000), (1, 50, 60)
    ]  # fmt: skip
    by_bytes = split(ranges, SplitRules(max_bytes=100 * 200), {QueueKey("T", "b", 0): 200.0})
    assert sum(1 for r in by_bytes if r.key.queue_id == 0) == 10
    at_least = split(ranges, SplitRules(min_partitions=6))
    assert len(at_least) >= 6 and sum(r.count for r in at_least) == 1010


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 10_000), max_size=12), st.integers(1, 5000))
def test_prorate_never_exceeds_the_limit_or_a_backlog(backlog, limit):
    keys = {QueueKey("T", "b", q): n for q, n in backlog.items()}
    grant = prorate(keys, limit)
    assert sum(grant.values()) == min(limit, sum(keys.values()))
    assert all(0 <= grant.get(k, 0) <= n for k, n in keys.items())
    if limit >= len([n for n in keys.values() if n]):
        assert all(grant.get(k, 0) >= 1 for k, n in keys.items() if n)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "T"}, '"namesrv" is required'),
        ({"namesrv": "h:1"}, 'exactly one of the options "topic", "topics" or "topicPattern"'),
        ({"namesrv": "h:1", "topic": "T", "topics": "A"}, "got topic, topics"),
        ({"namesrv": "h:1", "topic": "T", "startingOffsets": "{bad"}, '"startingOffsets": expected'),
        ({"namesrv": "h:1", "topic": "T", "endingOffsets": "earliest"}, "not allowed"),
        ({"namesrv": "h:1", "topic": "T", "maxOffsetsPerTrigger": "0"}, ">= 1"),
        ({"namesrv": "h:1", "topic": "T", "failOnDataLoss": "maybe"}, "true or false"),
        ({"namesrv": "h:1", "topicPattern": "("}, "not a regular expression"),
        ({"namesrv": "nohostport", "topic": "T"}, "not host:port"),
        ({"namesrv": "h:1", "topic": "T", "maxTriggerDelay": "soon"}, "duration"),
        ({"namesrv": "h:1", "topic": "T", "fetchOffset.numRetries": "-1"}, '"fetchOffset.numRetries".*>= 0'),
        ({"namesrv": "h:1", "topic": "T", "fetchOffset.retryIntervalMs": "1s"}, "retryIntervalMs"),
    ],
)
def test_bad_options_name_the_option(options, message):
    with pytest.raises(SparkOptionError, match=message):
        parse_source_options(options)


def test_options_are_case_insensitive_and_typed():
    parsed = parse_source_options(
        {"NAMESRV": "a:1;b:2", "Topics": "X, Y", "MAXOFFSETSPERTRIGGER": "10", "maxTriggerDelay": "2m",
         "startingOffsets": '{"X": {"broker-a": {"0": 5, "1": -2}}}', "maxBytesPerPartition": "64MiB"}
    )  # fmt: skip
    assert parsed.read.namesrv == ("a:1", "b:2") and parsed.topics == ("X", "Y")
    assert parsed.max_offsets_per_trigger == 10 and parsed.max_trigger_delay == 120.0
    assert parsed.starting_offsets == {"X": {"broker-a": {0: 5, 1: -2}}}
    assert parsed.max_bytes_per_partition == 64 * 1024 * 1024
    assert (parsed.fetch_retries, parsed.fetch_retry_interval) == (3, 1.0)  # Spark's Kafka source's defaults
    tuned = parse_source_options(
        {"namesrv": "a:1", "topic": "T", "FETCHOFFSET.NUMRETRIES": "0", "fetchOffset.retryIntervalMs": "250"}
    )
    assert (tuned.fetch_retries, tuned.fetch_retry_interval) == (0, 0.25)


def test_without_pyspark_the_cli_says_how_to_install_it(tmp_path):
    blocker = tmp_path / "blocker" / "pyspark"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError(\"No module named 'pyspark'\")\n")
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "blocker"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-m", "trocket", "export", "--topic", "T", "--to", "parquet", str(tmp_path / "o")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2 and "pip install 'trocket[spark]'" in run.stderr
    check = subprocess.run(
        [sys.executable, "-c", "import sys, plugins.spark_export, trocket.cli; "
         "from kernel.host import PluginHost; PluginHost.load(['store_mmap', 'spark_export']); "
         "print('pyspark' in sys.modules and sys.modules['pyspark'] is not None)"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0 and check.stdout.strip() == "False", check.stderr
