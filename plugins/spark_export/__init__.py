"""spark_export: Trocket topics as a PySpark data source and sink, and the export job.

- :func:`register` makes ``spark.read.format("trocket")``, ``spark.readStream.format("trocket")``,
  ``df.write.format("trocket")`` and ``df.writeStream.format("trocket")`` work in a session
  (the top-level module ``pyspark_trocket`` also lets Spark find the source by itself).
- As a broker plugin it only declares ``[spark_export]``, the export job's defaults
  (``trocket export -c FILE``); the broker itself never imports pyspark.

PySpark is optional: ``pip install 'trocket[spark]'`` (pyspark >= 4.2, pyarrow, numpy) and Java
17+. See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel import ConfigSection, hookimpl
from plugins.spark_export.config import SparkExportConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["INSTALL_HINT", "SparkExportConfig", "register", "spark_available"]

INSTALL_HINT = (
    "PySpark is not installed: install the optional extra with pip install 'trocket[spark]' "
    "(pyspark >= 4.2, pyarrow, numpy; Spark also needs Java 17 or newer on PATH)"
)


def spark_available() -> str | None:
    """None when pyspark, pyarrow and numpy import; otherwise what to install."""
    try:
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as error:
        return f"{INSTALL_HINT} ({error})"
    return None


def register(spark: SparkSession) -> Any:
    """Register the ``trocket`` data source with ``spark`` and return its class.

    :raises ImportError: pyspark, pyarrow or numpy is missing (the message says what to install).
    """
    problem = spark_available()
    if problem is not None:
        raise ImportError(problem)
    from plugins.spark_export.source import TrocketDataSource

    spark.dataSource.register(TrocketDataSource)
    return TrocketDataSource


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("spark_export", SparkExportConfig)]
