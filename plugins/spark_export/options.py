"""The source's and sink's options, parsed once on the driver into typed values.

Spark hands options over as case-insensitive strings; every mistake becomes a
:class:`SparkOptionError` naming the option and what was expected, before any work starts.
Names and meanings follow Spark's Kafka connector where one exists (``startingOffsets``,
``failOnDataLoss``, ``maxOffsetsPerTrigger``, ...); the offsets JSON is keyed by topic, broker
and queue as in RocketMQ's own Spark connector: ``{"T": {"broker-a": {"0": 23}}}`` where -2
means earliest and -1 latest.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from typing import Any

import attrs

from kernel.errors import TrocketError
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError
from trocket.client.tls import tls_context, tls_from_environment
from wire.remoting.signature import SessionCredentials

EARLIEST = -2
LATEST = -1
DEFAULT_PULL_BATCH = 1024
DEFAULT_PULL_CONCURRENCY = 8
DEFAULT_TRIGGER_DELAY_S = 15 * 60.0


class SparkOptionError(TrocketError, ValueError):
    """An option of ``format("trocket")`` is missing or malformed."""


OffsetSpec = int | dict[str, dict[str, dict[int, int]]]
"""``EARLIEST``, ``LATEST``, or offsets per topic → broker → queue id (-2/-1 allowed inside)."""


@attrs.frozen
class ClusterSecurity:
    """How executors and the driver reach a cluster with ACL or TLS on: options ``accessKey``
    and ``secretKey`` (else the driver's ``TROCKET_ACCESS_KEY``/``TROCKET_SECRET_KEY``, read
    once when the options are parsed, so executors need no environment of their own),
    ``tls`` (true/false) and ``tlsCaFile``. Plain values, since they are pickled into every
    partition; the SSL context is built where it is used."""

    access_key: str | None = None
    secret_key: str | None = attrs.field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None

    def credentials(self) -> SessionCredentials | None:
        if self.access_key and self.secret_key:
            return SessionCredentials(self.access_key, self.secret_key)
        return None

    def tls_context(self) -> ssl.SSLContext | None:
        return tls_context(self.tls_ca_file) if self.tls else None


@attrs.frozen
class ReadSettings:
    """What an executor needs to read a range (pickled into every partition)."""

    namesrv: tuple[str, ...]
    security: ClusterSecurity = ClusterSecurity()
    tag_expression: str = "*"
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH
    pull_concurrency: int = DEFAULT_PULL_CONCURRENCY
    pull_timeout: float = 30.0
    batch_rows: int = 16384


@attrs.frozen
class SourceOptions:
    read: ReadSettings
    topics: tuple[str, ...] = ()
    topic_pattern: re.Pattern[str] | None = None
    starting_offsets: OffsetSpec | None = None
    """None: the query kind's default (earliest for batch, latest for streaming)."""
    ending_offsets: OffsetSpec = LATEST
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_partition: int | None = None
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_TRIGGER_DELAY_S
    commit_offsets_to_group: str | None = None
    fetch_retries: int = 3
    """``fetchOffset.numRetries``: planning questions that got no answer are asked again this
    many times (Spark's Kafka source: the same option and default)."""
    fetch_retry_interval: float = 1.0
    """``fetchOffset.retryIntervalMs``: the pause before each of those retries."""

    def describe_topics(self) -> str:
        return ",".join(self.topics) if self.topics else f"pattern {self.topic_pattern.pattern!r}"  # type: ignore[union-attr]


@attrs.frozen
class SinkOptions:
    namesrv: tuple[str, ...]
    security: ClusterSecurity = ClusterSecurity()
    topic: str | None = None
    producer_group: str = "TROCKET_SPARK_SINK"
    batch_size: int = 128
    send_timeout: float = 10.0


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|min|mins|minutes?|seconds?|hours?)?\s*$", re.I)
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """:raises SparkOptionError: naming the first bad option."""
    opts = _lower(options)
    topics, pattern = _topics(opts)
    read = ReadSettings(
        namesrv=_namesrv(opts),
        security=_security(opts),
        tag_expression=opts.get("tagexpression", "*").strip() or "*",
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        pull_batch_size=_int(opts, "pullBatchSize", DEFAULT_PULL_BATCH, minimum=1),
        pull_concurrency=_int(opts, "pullConcurrency", DEFAULT_PULL_CONCURRENCY, minimum=1),
        pull_timeout=_int(opts, "pullTimeoutMs", 30_000, minimum=1) / 1000,
        batch_rows=_int(opts, "batchRows", 16384, minimum=1),
    )
    starting = _offsets(opts, "startingOffsets", allow_earliest=True) if "startingoffsets" in opts else None
    ending = _offsets(opts, "endingOffsets", allow_earliest=False) if "endingoffsets" in opts else LATEST
    max_bytes = opts.get("maxbytesperpartition")
    return SourceOptions(
        read=read,
        topics=topics,
        topic_pattern=pattern,
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp=_opt_int(opts, "startingTimestamp", minimum=0),
        ending_timestamp=_opt_int(opts, "endingTimestamp", minimum=0),
        max_records_per_partition=_opt_int(opts, "maxRecordsPerPartition", minimum=1),
        max_bytes_per_partition=_size("maxBytesPerPartition", max_bytes) if max_bytes is not None else None,
        min_partitions=_opt_int(opts, "minPartitions", minimum=1),
        max_offsets_per_trigger=_opt_int(opts, "maxOffsetsPerTrigger", minimum=1),
        min_offsets_per_trigger=_opt_int(opts, "minOffsetsPerTrigger", minimum=1),
        max_trigger_delay=_duration(opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay"),
        commit_offsets_to_group=opts.get("commitoffsetstogroup") or None,
        fetch_retries=_int(opts, "fetchOffset.numRetries", 3, minimum=0),
        fetch_retry_interval=_int(opts, "fetchOffset.retryIntervalMs", 1000, minimum=0) / 1000,
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    return SinkOptions(
        namesrv=_namesrv(opts),
        security=_security(opts),
        topic=opts.get("topic") or None,
        producer_group=opts.get("producergroup", "TROCKET_SPARK_SINK"),
        batch_size=_int(opts, "sendBatchSize", 128, minimum=1),
        send_timeout=_int(opts, "sendTimeoutMs", 10_000, minimum=1) / 1000,
    )


def offsets_to_json(offsets: Mapping[str, Mapping[str, Mapping[int, int]]]) -> str:
    return json.dumps(
        {
            t: {b: {str(q): o for q, o in sorted(qs.items())} for b, qs in sorted(bs.items())}
            for t, bs in offsets.items()
        },
        sort_keys=True,
    )


# --- helpers -------------------------------------------------------------------------------


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _namesrv(opts: dict[str, str]) -> tuple[str, ...]:
    raw = opts.get("namesrv") or opts.get("namesrvaddr") or opts.get("nameserver")
    if not raw:
        raise SparkOptionError('option "namesrv" is required: the NameServer address, e.g. 127.0.0.1:9876')
    addresses = tuple(a.strip() for a in re.split(r"[;,]", raw) if a.strip())
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SparkOptionError(f'option "namesrv": {address!r} is not host:port')
    return addresses


def _security(opts: dict[str, str]) -> ClusterSecurity:
    try:
        credentials = resolve_credentials(access_key=opts.get("accesskey"), secret_key=opts.get("secretkey"))
    except ClientError as error:
        raise SparkOptionError(f'options "accessKey"/"secretKey": {error}') from None
    try:
        env_tls, env_ca_file = tls_from_environment()
        ca_file = opts.get("tlscafile") or env_ca_file
        use_tls = _bool(opts, "tls", bool(opts.get("tlscafile")) or env_tls)
        if use_tls:
            tls_context(ca_file)  # a bad file is named on the driver, before any task starts
    except ClientError as error:
        raise SparkOptionError(f'options "tls"/"tlsCaFile": {error}') from None
    return ClusterSecurity(
        credentials.access_key if credentials else None,
        credentials.secret_key if credentials else None,
        use_tls,
        ca_file,
    )


def _topics(opts: dict[str, str]) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    given = [name for name in ("topic", "topics", "topicpattern") if opts.get(name)]
    if len(given) != 1:
        raise SparkOptionError(
            'exactly one of the options "topic", "topics" or "topicPattern" is required'
            + (f" (got {', '.join(given)})" if given else "")
        )
    if given[0] == "topicpattern":
        try:
            return (), re.compile(opts["topicpattern"])
        except re.error as error:
            raise SparkOptionError(f'option "topicPattern": not a regular expression: {error}') from None
    topics = tuple(dict.fromkeys(t.strip() for t in opts[given[0]].split(",") if t.strip()))
    if not topics:
        raise SparkOptionError(f'option "{given[0]}" names no topic')
    return topics, None


def _offsets(opts: dict[str, str], name: str, *, allow_earliest: bool) -> OffsetSpec:
    raw = opts[name.lower()].strip()
    if raw.lower() == "earliest":
        if not allow_earliest:
            raise SparkOptionError(f'option "{name}": "earliest" is not allowed here')
        return EARLIEST
    if raw.lower() == "latest":
        return LATEST
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as error:
        raise SparkOptionError(
            f'option "{name}": expected "earliest", "latest" or JSON like '
            f'{{"topic": {{"broker-a": {{"0": 23}}}}}}: {error}'
        ) from None
    out: dict[str, dict[str, dict[int, int]]] = {}
    if not isinstance(data, dict):
        raise SparkOptionError(f'option "{name}": the JSON must be an object keyed by topic')
    for topic, brokers in data.items():
        if not isinstance(brokers, dict):
            raise SparkOptionError(f'option "{name}": topic {topic!r} must map broker names to queues')
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise SparkOptionError(f'option "{name}": {topic}/{broker} must map queue ids to offsets')
            for queue_id, offset in queues.items():
                if not str(queue_id).isdigit() or not isinstance(offset, int) or isinstance(offset, bool):
                    raise SparkOptionError(
                        f'option "{name}": {topic}/{broker}/{queue_id}: '
                        "expected a queue id and an integer offset"
                    )
                if offset < EARLIEST or (offset == EARLIEST and not allow_earliest):
                    raise SparkOptionError(
                        f'option "{name}": {topic}/{broker}/{queue_id}: offset {offset} is not allowed'
                    )
                out.setdefault(topic, {}).setdefault(broker, {})[int(queue_id)] = offset
    return out


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise SparkOptionError(f'option "{name}": expected true or false, got {raw!r}')


def _opt_int(opts: dict[str, str], name: str, *, minimum: int) -> int | None:
    return _int(opts, name, None, minimum=minimum) if name.lower() in opts else None


def _int(opts: dict[str, str], name: str, default: Any, *, minimum: int) -> Any:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f'option "{name}": expected an integer, got {raw!r}') from None
    if value < minimum:
        raise SparkOptionError(f'option "{name}": expected an integer >= {minimum}, got {value}')
    return value


def _size(name: str, raw: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]i?b?|b)?\s*", raw, re.I)
    if not match:
        raise SparkOptionError(f'option "{name}": expected bytes or a size like "64MiB", got {raw!r}')
    unit = (match.group(2) or "b").lower()[:1]
    value = int(match.group(1)) * {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]
    if value < 1:
        raise SparkOptionError(f'option "{name}": must be at least 1 byte')
    return value


def _duration(raw: str, name: str) -> float:
    match = _DURATION.match(raw)
    if not match:
        raise SparkOptionError(f'option "{name}": expected a duration like "30s" or "15m", got {raw!r}')
    unit = (match.group(2) or "s").lower()
    factor = _UNITS.get(unit) or _UNITS.get(unit[0], 1)
    if unit.startswith("min"):
        factor = 60
    return float(match.group(1)) * factor
