"""Broker backlog to Parquet through the ``trocket`` Spark source, next to plain pyarrow.

One run on this machine:

1. ``trocket up`` (default broker settings unless ``--max-pull`` is given) gets a backlog of
   ``--messages`` (default 1,000,000) messages with 200 B random bodies, tags, keys and two
   properties, over one auto-created topic (4 queues).
2. **Baseline**: one Python process pulls the same messages with the SDK (``pull``, decoded to
   ``ReceivedMessage``), builds a pyarrow table of the source's schema and writes Parquet.
3. **Spark**: ``spark.read.format("trocket")...write.parquet()`` on ``local[2]`` (two cores, the
   baseline's CPU plus one), after a warm-up query (the first Python data-source query of a
   session spawns workers), three times: the first run pays for the JVM compiling Spark's
   Parquet writer (about half of its CPU at 500k rows), the later ones show a warming and a
   warmed session. Then once into Spark's ``noop`` sink: the source's own rate through Spark.

Prints rows/s of each and the ratio Spark / baseline, against the target of 140,000 rows/s
(the Parquet runs; the target is about a warmed session).

    ./run bench spark_export [--messages 1000000] [--max-pull 1024] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import running_trocket  # noqa: E402

TARGET_ROWS_PER_S = 140_000
NOOP_LABEL = "source only, noop sink"
TOPIC = "SparkBench"
QUEUES = 4


async def build_backlog(namesrv: str, count: int) -> float:
    from trocket import Message, Producer

    async with Producer("PG_spark_bench", namesrv, send_timeout=60) as producer:
        await producer.send(Message(TOPIC, b"warm"))
        queues = await producer.fetch_publish_message_queues(TOPIC)
        per_batch = 128
        rounds = (count - 1) // per_batch

        async def sender(worker: int, workers: int) -> None:
            for n in range(worker, rounds, workers):
                batch = [
                    Message(TOPIC, os.urandom(200), tags=f"tag{i % 4}", keys=(f"key-{n}-{i}",),
                            properties={"source": "bench", "seq": str(n * per_batch + i)})
                    for i in range(per_batch)
                ]  # fmt: skip
                await producer.send_batch(batch, queue=queues[n % len(queues)])

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for worker in range(8):
                nursery.start_soon(sender, worker, 8)
        tail = count - 1 - rounds * per_batch
        for _ in range(tail):
            await producer.send(Message(TOPIC, os.urandom(200)))
        return (count - 1) / (time.perf_counter() - started)


def baseline(namesrv: str, out: Path) -> tuple[int, float]:
    """The SDK pulls every queue and pyarrow writes the rows as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from plugins.spark_export.schema import ARROW_SCHEMA
    from trocket.admin.client import TOOLS_CONSUMER
    from trocket.client.consumer.pulling import pull
    from trocket.client.consumer.session import new_subscription
    from trocket.client.routes import RouteCache
    from wire.remoting import RemotingClient

    columns: dict[str, list[object]] = {name: [] for name in ARROW_SCHEMA.names}

    async def main() -> None:
        async with RemotingClient.open() as remoting:
            queues, addresses = await RouteCache(remoting, [namesrv]).subscribe_info(TOPIC)
            for queue in queues:
                offset, subscription = 0, new_subscription(TOPIC)
                while True:
                    result = await pull(remoting, addresses[queue.broker_name], TOOLS_CONSUMER, queue, offset,
                                        subscription, max_nums=1024, suspend_ms=0)  # fmt: skip
                    if not result.messages:
                        break
                    for m in result.messages:
                        props = m.properties
                        row = (
                            m.topic, queue.broker_name, queue.queue_id, m.queue_offset, m.commit_log_offset,
                            m.offset_msg_id, m.unique_key, m.tags, props.get("KEYS", "").split(" "), m.body,
                            list(props.items()), m.born_timestamp * 1000, m.store_timestamp * 1000,
                            m.born_host, m.store_host, m.reconsume_times, m.sys_flag,
                        )  # fmt: skip
                        for name, value in zip(ARROW_SCHEMA.names, row, strict=True):
                            columns[name].append(value)
                    offset = result.next_begin_offset

    started = time.perf_counter()
    trio.run(main)
    table = pa.table(
        {name: pa.array(columns[name], ARROW_SCHEMA.field(name).type) for name in ARROW_SCHEMA.names}
    )
    pq.write_table(table, out / "baseline.parquet")
    return table.num_rows, time.perf_counter() - started


def spark_export(namesrv: str, out: Path, master: str) -> list[tuple[str, int, float]]:
    """The whole backlog to Parquet three times in one session: the first run right after a
    small warm-up query (Python workers started, the JVM's Parquet writer still interpreted),
    then as the JIT compiles the writer, as in a long-lived session or a streaming query (on a
    slow VM the second run is still partly interpreted). Then once into Spark's ``noop`` sink:
    the source's own rate through Spark, without Parquet. Returns (label, rows, seconds) per
    run."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from plugins.spark_export.session import trocket_session

    spark = trocket_session(
        master, app_name="trocket-bench", driver_memory="4g", conf={"spark.ui.enabled": "false"}
    )
    try:

        def reader():  # a DataFrameReader keeps its options: one per query
            return spark.read.format("trocket").option("namesrv", namesrv).option("topic", TOPIC)

        warm = reader().option("endingOffsets", f'{{"{TOPIC}": {{"broker-a": {{"0": 1000}}}}}}').load()
        warm.write.format("noop").mode("overwrite").save()
        runs = []
        for label in ("first run", "second run", "third run"):
            target = out / f"spark-{len(runs)}"
            started = time.perf_counter()
            reader().load().write.mode("overwrite").parquet(str(target))
            seconds = time.perf_counter() - started
            runs.append((label, spark.read.parquet(str(target)).count(), seconds))
            shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        reader().load().write.format("noop").mode("overwrite").save()
        seconds = time.perf_counter() - started
        runs.append((NOOP_LABEL, reader().load().count(), seconds))
        return runs
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--max-pull", type=int, default=None, help="broker max_pull_messages (default 32)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    from plugins.spark_export import spark_available

    problem = spark_available()
    if problem:
        raise SystemExit(problem)
    if shutil.which("java") is None:
        raise SystemExit("Java 17+ is needed for Spark and is not on PATH")
    root = Path(tempfile.mkdtemp(prefix="trocket-spark-bench-"))
    remoting = (
        f'[remoting]\nmax_pull_messages = {args.max_pull}\nmax_pull_bytes = "4MiB"\n' if args.max_pull else ""
    )
    tables = remoting + '[store_mmap]\ncommit_log_file_size = "512MiB"\n'
    with running_trocket(root, tables=tables) as namesrv:
        print(f"backlog: {args.messages:,} messages of 200 B in {QUEUES} queues", flush=True)
        rate = trio.run(build_backlog, namesrv, args.messages)
        print(f"  produced at {rate:,.0f} msgs/s", flush=True)
        rows, seconds = baseline(namesrv, root)
        base = rows / seconds
        print(
            f"baseline (SDK pull + pyarrow, 1 process): {rows:,} rows in {seconds:.1f}s = {base:,.0f} rows/s"
        )
        for label, rows, seconds in spark_export(namesrv, root, args.master):
            through_spark = rows / seconds
            sink = "noop" if label == NOOP_LABEL else "parquet"
            verdict = "met" if through_spark >= TARGET_ROWS_PER_S else "NOT met"
            target = f"; target {TARGET_ROWS_PER_S:,} rows/s {verdict}" if sink == "parquet" else ""
            print(
                f"spark source -> {sink}, {label} ({args.master}, broker max_pull_messages "
                f"{args.max_pull or 32}): {rows:,} rows in {seconds:.1f}s = {through_spark:,.0f} rows/s; "
                f"ratio spark / baseline {through_spark / base:.2f}{target}"
            )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
