"""What message trace costs a producer: pipelined sends with ``trace=True`` against the same
sends untraced, measured in the same run, alternating rounds (the median of each side).

The target (issue 37): a traced send costs at most 10 % of pipelined throughput, i.e. traced
sends/s >= 0.90 x untraced at 64 in flight. One in flight is printed too (the Pub record is
built after the answer, so it adds to each round trip). Each traced round prints the trace
records its producer wrote.

    ./run bench trace [--messages 20000] [--rounds 7] [--size 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import running_trocket  # noqa: E402
from trocket import Message, Producer  # noqa: E402

TARGET = 0.90
TOPIC = "BenchTraced"


async def send_rate(namesrv: str, body: bytes, total: int, in_flight: int, traced: bool) -> tuple[float, int]:
    """Sends/s with ``in_flight`` tasks, and the trace records the producer wrote."""
    producer = Producer(f"PG_bench_{'traced' if traced else 'plain'}", namesrv, send_timeout=30, trace=traced)
    async with producer:
        await producer.send(Message(TOPIC, body))  # route, connection and trace topic warm

        async def sender(count: int) -> None:
            for _ in range(count):
                await producer.send(Message(TOPIC, body, keys=["order-1"], tags="paid"))

        per_task = total // in_flight
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(sender, per_task)
        elapsed = time.perf_counter() - started
        tracer = producer._tracer
    written = tracer.written if tracer is not None else 0
    return per_task * in_flight / elapsed, written


async def workloads(namesrv: str, args: argparse.Namespace) -> dict[str, list[float]]:
    body = os.urandom(args.size // 2).hex().encode()[: args.size]
    rates: dict[str, list[float]] = {}
    for in_flight in (64, 1):
        total = args.messages if in_flight == 64 else max(1000, args.messages // 10)
        for round_ in range(args.rounds):
            for traced in (False, True) if round_ % 2 == 0 else (True, False):
                rate, written = await send_rate(namesrv, body, total, in_flight, traced)
                rates.setdefault(f"{'traced' if traced else 'plain'} {in_flight}", []).append(rate)
                note = f", {written} trace records written" if traced else ""
                print(
                    f"  round {round_ + 1}: {in_flight:>2} in flight, {'traced' if traced else 'plain '}: "
                    f"{rate:,.0f}/s{note}",
                    flush=True,
                )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000, help="sends per round at 64 in flight")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    tables = '[remoting]\ntrace_topic_enable = true\n[store_mmap]\ncommit_log_file_size = "256MiB"\n'
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as root:
        print(f"trocket up (traceTopicEnable), {args.size} B bodies, {args.rounds} rounds each", flush=True)
        with running_trocket(Path(root), "", tables) as namesrv:
            rates = trio.run(workloads, namesrv, args)
    print()
    print(f"{'workload':<26}{'median/s':>12}{'vs plain':>10}")
    for in_flight in (64, 1):
        plain = statistics.median(rates[f"plain {in_flight}"])
        traced = statistics.median(rates[f"traced {in_flight}"])
        print(f"{'plain, ' + str(in_flight) + ' in flight':<26}{plain:>12,.0f}{'1.00x':>10}")
        print(f"{'traced, ' + str(in_flight) + ' in flight':<26}{traced:>12,.0f}{traced / plain:>9.2f}x")
    ratio = statistics.median(rates["traced 64"]) / statistics.median(rates["plain 64"])
    verdict = "met" if ratio >= TARGET else "MISSED"
    print(f"\ntarget: traced sends >= {TARGET:.0%} of plain at 64 in flight: {ratio:.0%} ({verdict})")


if __name__ == "__main__":
    main()
