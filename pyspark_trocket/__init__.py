"""Lets Spark find ``format("trocket")`` without a ``register`` call: PySpark looks up top-level
``pyspark_*`` modules with a ``DefaultSource`` on the Python path."""

from plugins.spark_export.source import TrocketDataSource as DefaultSource

__all__ = ["DefaultSource"]
