"""The export job behind ``trocket export``: topics to Parquet through the ``trocket`` source.

Two modes:

- **batch** (default): one read of the planned offset range, appended to the output; the
  offsets it covered are written next to the data in ``_trocket_export/<run>.json`` and printed,
  so a later run can continue with ``--from`` those offsets.
- **stream** (``--stream --checkpoint DIR``): a Structured Streaming query into Spark's file
  sink. With the default AvailableNow trigger it exports what is there and stops; run it again
  (cron) and it continues from the checkpoint, each message exactly once in the output as Spark
  reads it (``_spark_metadata``). ``--continuous`` keeps it running.

Progress (stages' tasks, or each micro-batch's rows and lag) is printed while it runs.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs

from kernel.errors import TrocketError

DATE_COLUMN = "date"


class ExportError(TrocketError):
    """The export could not start or failed; the message says why."""


@attrs.frozen
class ExportSpec:
    namesrv: tuple[str, ...]
    security: Mapping[str, str] = attrs.field(factory=dict, repr=False, kw_only=True)
    """Source options ``accessKey``, ``secretKey``, ``tls``, ``tlsCaFile`` (see ClusterSecurity)."""
    output: Path
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    output_format: str = "parquet"
    partition_by: tuple[str, ...] = ("topic", DATE_COLUMN)
    start: str | None = None
    """``earliest``, ``latest``, a time (ms or ISO-8601), or offsets JSON."""
    end: str | None = None
    stream: bool = False
    checkpoint: Path | None = None
    continuous: bool = False
    trigger_interval: float = 10.0
    max_offsets_per_trigger: int = 0
    tag_expression: str = "*"
    fail_on_data_loss: bool = True
    master: str = "local[*]"
    driver_memory: str = "2g"
    spark_conf: tuple[str, ...] = ()


@attrs.frozen
class ExportResult:
    rows: int
    seconds: float
    batches: int = 1
    offsets: str | None = None
    """The end offsets covered (batch mode), as the source's JSON."""


def position_options(value: str | None, which: str) -> dict[str, str]:
    """``--from`` / ``--to`` values as source options (``startingOffsets`` / ``endingTimestamp`` ...)."""
    if value is None:
        return {}
    text = value.strip()
    prefix = "starting" if which == "from" else "ending"
    if text in ("earliest", "latest") or text.startswith("{"):
        return {f"{prefix}Offsets": text}
    if text.isdigit():
        return {f"{prefix}Timestamp": text}
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ExportError(
            f"--{which} {value!r}: expected earliest, latest, a time in ms or ISO-8601, or offsets JSON"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return {f"{prefix}Timestamp": str(int(moment.timestamp() * 1000))}


def source_options(spec: ExportSpec) -> dict[str, str]:
    options = {
        "namesrv": ",".join(spec.namesrv),
        "tagExpression": spec.tag_expression,
        "failOnDataLoss": str(spec.fail_on_data_loss).lower(),
    } | {name: value for name, value in spec.security.items() if value}
    if spec.topic_pattern:
        options["topicPattern"] = spec.topic_pattern
    else:
        options["topics"] = ",".join(spec.topics)
    options |= position_options(spec.start, "from")
    if spec.stream:
        if spec.end is not None:
            raise ExportError("--to (an end position) applies to batch exports only, not --stream")
        if spec.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(spec.max_offsets_per_trigger)
        if "startingTimestamp" not in options:
            options.setdefault("startingOffsets", "earliest")
    else:
        options |= position_options(spec.end, "to")
    return options


def build_session(spec: ExportSpec) -> Any:
    """A Spark session for the job, with the trocket source registered."""
    from plugins.spark_export.session import trocket_session

    conf = {}
    for item in spec.spark_conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ExportError(f"spark setting {item!r} is not key=value")
        conf[key.strip()] = value.strip()
    return trocket_session(
        spec.master, app_name="trocket-export", driver_memory=spec.driver_memory, conf=conf
    )


def run_export(spec: ExportSpec, *, out: TextIO | None = None, session: Any = None) -> ExportResult:
    """Run the export; prints progress to ``out`` (standard output by default). With
    ``session`` the job runs in that Spark session and leaves it open.

    :raises ExportError: bad arguments, or the Spark job failed (its first line is included).
    """
    if spec.output_format != "parquet":
        raise ExportError(f"--to {spec.output_format}: only parquet is supported")
    if spec.stream and spec.checkpoint is None:
        raise ExportError("--stream needs --checkpoint DIR (where the query's progress is kept)")
    out = out or sys.stdout
    spark = session or build_session(spec)
    try:
        if spec.stream:
            return _stream(spark, spec, out)
        return _batch(spark, spec, out)
    except TrocketError:
        raise
    except Exception as error:  # noqa: BLE001 - Spark's errors are long; keep the cause's first line
        raise ExportError(f"the export failed: {_first_line(error)}") from error
    finally:
        if session is None:
            spark.stop()


def _with_partition_columns(df: Any, spec: ExportSpec) -> Any:
    from pyspark.sql import functions as F

    if DATE_COLUMN in spec.partition_by:
        df = df.withColumn(DATE_COLUMN, F.to_date(F.col("storeTimestamp")))
    unknown = [c for c in spec.partition_by if c not in df.columns]
    if unknown:
        raise ExportError(f"--partition-by {','.join(unknown)}: not a column (have {', '.join(df.columns)})")
    return df


def _batch(spark: Any, spec: ExportSpec, out: TextIO) -> ExportResult:
    from plugins.spark_export.catalog import BrokerCatalog
    from plugins.spark_export.options import parse_source_options
    from plugins.spark_export.planning import batch_ranges, to_offset_dict

    options = source_options(spec)
    parsed = parse_source_options(options)
    planned = batch_ranges(parsed, BrokerCatalog.of(parsed))
    total = sum(r.count for r in planned)
    ends = {r.key: r.end for r in planned}
    starts = {r.key: r.start for r in planned}
    # Read exactly what was planned and reported, even if messages arrive meanwhile.
    options["startingOffsets"] = json.dumps(to_offset_dict(starts))
    options["endingOffsets"] = json.dumps(to_offset_dict(ends))
    for key in ("startingTimestamp", "endingTimestamp"):
        options.pop(key, None)
    print(f"export: {total} messages from {len(planned)} queues -> {spec.output}", file=out, flush=True)
    df = _with_partition_columns(spark.read.format("trocket").options(**options).load(), spec)
    started = time.monotonic()
    with _StageProgress(spark, out, total):
        writer = df.write.mode("append")
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        writer.parquet(str(spec.output))
    seconds = time.monotonic() - started
    end_json = json.dumps(to_offset_dict(ends), sort_keys=True)
    _write_run_record(spec.output, starts, ends, total)
    print(
        f"export: done, {total} rows in {seconds:.1f}s ({total / max(seconds, 1e-9):,.0f} rows/s)", file=out
    )
    print(f"export: next run: --from '{end_json}'", file=out, flush=True)
    return ExportResult(total, seconds, 1, end_json)


def _write_run_record(output: Path, starts: dict[Any, int], ends: dict[Any, int], rows: int) -> None:
    from plugins.spark_export.planning import to_offset_dict

    runs = output / "_trocket_export"
    runs.mkdir(parents=True, exist_ok=True)
    record = {
        "finishedAt": int(time.time() * 1000),
        "rows": rows,
        "startingOffsets": to_offset_dict(starts),
        "endingOffsets": to_offset_dict(ends),
    }
    path = runs / f"{record['finishedAt']}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, indent=2, sort_keys=True))
    temporary.replace(path)


def _stream(spark: Any, spec: ExportSpec, out: TextIO) -> ExportResult:
    options = source_options(spec)
    df = _with_partition_columns(spark.readStream.format("trocket").options(**options).load(), spec)
    writer = (
        df.writeStream.format("parquet")
        .option("path", str(spec.output))
        .option("checkpointLocation", str(spec.checkpoint))
    )
    if spec.partition_by:
        writer = writer.partitionBy(*spec.partition_by)
    if spec.continuous:
        writer = writer.trigger(processingTime=f"{spec.trigger_interval} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    started = time.monotonic()
    query = writer.start()
    print(
        f"export: streaming query {query.id} -> {spec.output} (checkpoint {spec.checkpoint})",
        file=out,
        flush=True,
    )
    rows, batches = 0, 0
    seen: set[int] = set()

    def report() -> None:
        nonlocal rows, batches
        for progress in query.recentProgress:
            batch_id = progress.batchId
            if batch_id in seen:
                continue
            seen.add(batch_id)
            batches += 1
            rows += progress.numInputRows
            lag = _lag(progress)
            print(
                f"export: batch {batch_id}: {progress.numInputRows} rows"
                f"{f', {lag} behind latest' if lag is not None else ''}",
                file=out,
                flush=True,
            )

    try:
        while query.isActive:
            report()
            query.awaitTermination(1.0)
        report()
        if query.exception() is not None:
            raise ExportError(f"the streaming export failed: {_first_line(query.exception())}")
    except KeyboardInterrupt:
        query.stop()
        report()
    seconds = time.monotonic() - started
    print(f"export: {rows} rows in {batches} batches, {seconds:.1f}s", file=out, flush=True)
    return ExportResult(rows, seconds, batches)


def _lag(progress: Any) -> int | None:
    try:
        source = progress.sources[0]
        end = json.loads(source.endOffset) if isinstance(source.endOffset, str) else source.endOffset
        latest = (
            json.loads(source.latestOffset) if isinstance(source.latestOffset, str) else source.latestOffset
        )
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    if not end or not latest:
        return None
    from plugins.spark_export.planning import from_offset_dict

    done, top = from_offset_dict(end), from_offset_dict(latest)
    return sum(max(0, v - done.get(k, 0)) for k, v in top.items())


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    for line in text.splitlines():
        if "Error" in line or "error" in line:
            return line.strip()[:500]
    return text.splitlines()[0][:500]


class _StageProgress:
    """Prints completed/total tasks of the running stages every two seconds."""

    def __init__(self, spark: Any, out: TextIO, total: int, interval: float = 2.0) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.out = out
        self.total = total
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="export-progress", daemon=True)

    def __enter__(self) -> _StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = ""
        while not self._stop.wait(self.interval):
            line = self._line()
            if line and line != last:
                print(line, file=self.out, flush=True)
                last = line

    def _line(self) -> str:
        parts = []
        for stage_id in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
        return f"export: {'; '.join(parts)} ({self.total} messages planned)" if parts else ""
