"""``trocket export``: topics to Parquet through Spark, a command this plugin contributes to the
``trocket`` CLI through the ``trocket.commands`` entry-point group (the CLI never imports it).

``--to`` is used twice, as in ``trocket export --topic T --to parquet out/ --from earliest --to
2026-01-01T00:00``: two values name the output (format and path), one value is where to stop.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kernel.config import load_config
from kernel.errors import TrocketError
from kernel.host import PluginHost
from trocket.cli.connection_options import add_connection_options, credentials_of, tls_of

DEFAULT_NAMESRV = "127.0.0.1:9876"
FORMATS = ("parquet",)


class ExportUsageError(TrocketError):
    """Bad ``trocket export`` arguments, or the optional Spark extra is not installed."""


def add_parsers(sub: Any) -> None:
    export = sub.add_parser(
        "export",
        help="export topics to Parquet through Spark (needs trocket[spark] and Java 17+)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument(
        "-n", "--namesrvAddr", dest="namesrv", default=None, help=f"default {DEFAULT_NAMESRV}"
    )
    export.add_argument(
        "-c", "--config", type=Path, help="a broker config listing spark_export: [spark_export] defaults"
    )
    export.add_argument("-t", "--topic", action="append", default=[], help="topic to export (repeatable)")
    export.add_argument(
        "--topic-pattern", help="regular expression over topic names (system topics excluded)"
    )
    export.add_argument(
        "--to",
        nargs="+",
        action="append",
        default=[],
        metavar="ARG",
        help="FORMAT PATH: the output (parquet); or POSITION: where to stop (batch mode)",
    )
    export.add_argument(
        "--from", dest="start", help="earliest, latest, a time (ms or ISO-8601) or offsets JSON"
    )
    export.add_argument(
        "--partition-by", help="comma-separated output partition columns (default topic,date)"
    )
    export.add_argument("-s", "--subExpression", dest="expression", default="*", help="tag expression")
    export.add_argument("--stream", action="store_true", help="a checkpointed streaming export (resumable)")
    export.add_argument("--checkpoint", type=Path, help="checkpoint directory of --stream")
    export.add_argument("--continuous", action="store_true", help="with --stream: keep running")
    export.add_argument("--max-offsets-per-trigger", type=int, default=None)
    export.add_argument(
        "--skip-lost", action="store_true", help="skip offsets retention deleted (failOnDataLoss=false)"
    )
    export.add_argument("--master", default=None, help="Spark master (default local[*])")
    add_connection_options(export)
    export.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from plugins.spark_export import spark_available

    problem = spark_available()
    if problem is not None:
        raise ExportUsageError(problem)
    from plugins.spark_export.export_job import ExportSpec, run_export

    defaults = _config_defaults(args.config)
    output, end = _outputs(args.to)
    if not args.topic and not args.topic_pattern:
        raise ExportUsageError("name the topics: --topic T (repeatable) or --topic-pattern REGEX")
    partition_by = (
        tuple(c.strip() for c in args.partition_by.split(",") if c.strip())
        if args.partition_by is not None
        else tuple(defaults.get("partition_by", ("topic", "date")))
    )
    max_per_trigger = args.max_offsets_per_trigger
    if max_per_trigger is None:
        max_per_trigger = defaults.get("max_offsets_per_trigger", 0)
    spec = ExportSpec(
        namesrv=tuple(
            (args.namesrv or defaults.get("namesrv") or DEFAULT_NAMESRV).replace(";", ",").split(",")
        ),
        output=output[1],
        output_format=output[0],
        topics=tuple(args.topic),
        topic_pattern=args.topic_pattern,
        partition_by=partition_by,
        start=args.start,
        end=end,
        stream=args.stream,
        checkpoint=args.checkpoint,
        continuous=args.continuous,
        trigger_interval=defaults.get("trigger_interval", 10.0),
        max_offsets_per_trigger=max_per_trigger,
        tag_expression=args.expression,
        fail_on_data_loss=not args.skip_lost,
        master=args.master or defaults.get("master", "local[*]"),
        driver_memory=defaults.get("driver_memory", "2g"),
        spark_conf=tuple(defaults.get("spark_conf", ())),
        security=_security(args),
    )
    run_export(spec)
    return 0


def _outputs(values: list[list[str]]) -> tuple[tuple[str, Path], str | None]:
    output: tuple[str, Path] | None = None
    end: str | None = None
    for value in values:
        if len(value) == 2:
            if value[0] not in FORMATS:
                raise ExportUsageError(
                    f"--to {value[0]} {value[1]}: the format must be one of {', '.join(FORMATS)}"
                )
            output = (value[0], Path(value[1]))
        elif len(value) == 1:
            end = value[0]
        else:
            raise ExportUsageError(f"--to {' '.join(value)}: expected FORMAT PATH or one POSITION")
    if output is None:
        raise ExportUsageError("name the output: --to parquet PATH")
    return output, end


def _config_defaults(path: Path | None) -> dict[str, Any]:
    """``[spark_export]`` of a broker config (which must list the plugin) plus its NameServers."""
    if path is None:
        return {}
    config = load_config(path)
    if "spark_export" not in config.broker.plugins:
        raise ExportUsageError(
            f"{path}: [broker] plugins does not list spark_export; add it to enable the export job"
        )
    from plugins.spark_export.config import SparkExportConfig

    validated = PluginHost.load(config.broker.plugins).validate_sections(config)
    section: SparkExportConfig = validated.get(SparkExportConfig, SparkExportConfig())
    return {
        "namesrv": ",".join(config.broker.namesrv_addr),
        "master": section.master,
        "driver_memory": section.driver_memory,
        "spark_conf": section.spark_conf,
        "partition_by": section.partition_by,
        "max_offsets_per_trigger": section.max_offsets_per_trigger,
        "trigger_interval": section.trigger_interval,
    }


def _security(args: argparse.Namespace) -> dict[str, str]:
    """The source options that carry ``--authKey``/``--tls`` (the environment's keys are read
    by the source itself)."""
    credentials = credentials_of(args)
    tls_of(args)  # an unusable CA file is reported here, before Spark starts
    options = {"tlsCaFile": args.tls_ca_file or "", "tls": "true" if args.tls or args.tls_ca_file else ""}
    if credentials is not None:
        options |= {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}
    return options
