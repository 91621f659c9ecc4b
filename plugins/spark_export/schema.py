"""The source's fixed row schema, in Arrow and in Spark terms.

Like Kafka's source, the schema is fixed: a user-supplied schema is refused. The Arrow form is
what :mod:`plugins.spark_export.arrow_records` builds; Spark checks the first batch of a read
against ``to_arrow_schema(spark_schema)`` field for field (names, order, types, nullability),
so the two are kept equal here and by a test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "string"),
    ("brokerName", "string"),
    ("queueId", "int"),
    ("queueOffset", "bigint"),
    ("commitLogOffset", "bigint"),
    ("msgId", "string"),
    ("uniqKey", "string"),
    ("tags", "string"),
    ("keys", "array<string>"),
    ("body", "binary"),
    ("properties", "map<string,string>"),
    ("bornTimestamp", "timestamp"),
    ("storeTimestamp", "timestamp"),
    ("bornHost", "string"),
    ("storeHost", "string"),
    ("reconsumeTimes", "int"),
    ("sysFlag", "int"),
)
"""Column names and Spark SQL types, in order."""

DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)

TIMESTAMP = pa.timestamp("us", tz="UTC")
KEYS_TYPE = pa.list_(pa.field("element", pa.string()))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())

_ARROW_TYPES = {
    "string": pa.string(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "binary": pa.binary(),
    "timestamp": TIMESTAMP,
    "array<string>": KEYS_TYPE,
    "map<string,string>": PROPERTIES_TYPE,
}

ARROW_SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in COLUMNS])
"""Every column nullable, as Spark's DDL makes them (only uniqKey, tags and keys hold nulls)."""


def spark_schema() -> StructType:
    """The schema as a Spark ``StructType`` (needs pyspark)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    spark_types = {
        "string": StringType(),
        "int": IntegerType(),
        "bigint": LongType(),
        "binary": BinaryType(),
        "timestamp": TimestampType(),
        "array<string>": ArrayType(StringType()),
        "map<string,string>": MapType(StringType(), StringType()),
    }
    return StructType([StructField(name, spark_types[kind]) for name, kind in COLUMNS])
