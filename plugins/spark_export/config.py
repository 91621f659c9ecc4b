"""``[spark_export]``: defaults of the export job (``trocket export -c FILE``) for a deployment
that lists ``spark_export`` among its plugins. Command-line flags override them."""

from __future__ import annotations

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class SparkExportConfig:
    master: str = fields.string("local[*]")
    """Spark master URL of the export job (``local[*]`` runs Spark inside the job's process)."""
    driver_memory: str = fields.string("2g")
    """``spark.driver.memory``."""
    spark_conf: list[str] = fields.string_list([])
    """Further Spark settings as ``"key=value"`` strings, e.g. ``"spark.sql.shuffle.partitions=4"``."""
    partition_by: list[str] = fields.string_list(["topic", "date"])
    """Output partition columns: any source column, or ``date`` (the store day, UTC)."""
    max_offsets_per_trigger: int = fields.integer(0, minimum=0)
    """Messages per micro-batch at most in ``--stream`` mode (0: no limit)."""
    trigger_interval: float = fields.duration("10s")
    """Micro-batch interval in ``--stream`` mode without ``--available-now``."""
