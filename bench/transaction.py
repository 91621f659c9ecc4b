"""Transactional messages against a real broker, next to plain sends measured in the same run.

* committed transactions/s (half send + local executor + END_TRANSACTION commit) with 1 and 64
  in flight, against plain sends/s with the same concurrency (the target: >= 40 % of plain at 64);
* check-back throughput: ``--pending`` (default 10,000) half messages left UNKNOW, then resolved
  by the broker's check-back and the producer's check listener (commit), from the first check to
  the last commit.

    ./run bench transaction [--messages 20000] [--pending 10000] [--size 128] [--flush async]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import running_trocket  # noqa: E402
from trocket import Message, Producer, TransactionProducer, TransactionState  # noqa: E402
from trocket.admin.client import AdminClient  # noqa: E402

TARGET_RATIO_64 = 0.40


async def rate(send: Callable[[], Awaitable[object]], total: int, in_flight: int) -> float:
    """Calls of ``send`` per second with ``in_flight`` tasks calling it ``total`` times in all."""

    async def sender(count: int) -> None:
        for _ in range(count):
            await send()

    per_task = total // in_flight
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(sender, per_task)
    return per_task * in_flight / (time.perf_counter() - started)


async def plain_rate(namesrv: str, body: bytes, total: int, in_flight: int) -> float:
    async with Producer("PG_bench_plain", namesrv, send_timeout=30) as producer:
        await producer.send(Message("BenchPlain", body))  # route and connection warm
        return await rate(lambda: producer.send(Message("BenchPlain", body)), total, in_flight)


async def transaction_rate(namesrv: str, body: bytes, total: int, in_flight: int) -> float:
    def commit(message: Message, arg: object) -> TransactionState:
        return TransactionState.COMMIT

    async with TransactionProducer("PG_bench_tx", namesrv, send_timeout=30) as producer:
        await producer.send_message_in_transaction(Message("BenchTx", body), commit)
        return await rate(
            lambda: producer.send_message_in_transaction(Message("BenchTx", body), commit), total, in_flight
        )


async def broker_figures(namesrv: str) -> dict[str, str]:
    async with AdminClient.open([namesrv]) as admin:
        (address,) = (await admin.master_addrs()).values()
        return await admin.broker_runtime_info(address)


async def check_back_rate(namesrv: str, body: bytes, pending: int) -> tuple[float, float]:
    """(check-backs resolved per second, seconds from the first check to the last commit)."""
    first_check: list[float] = []

    def check(message: object) -> TransactionState:
        if not first_check:
            first_check.append(time.perf_counter())
        return TransactionState.COMMIT

    unknown = TransactionState.UNKNOW
    before = int((await broker_figures(namesrv)).get("transactionCommitted", "0"))
    async with TransactionProducer(
        "PG_bench_check", namesrv, check_listener=check, send_timeout=30
    ) as producer:
        await producer.send_message_in_transaction(Message("BenchCheck", body), lambda m, a: unknown)
        await rate(
            lambda: producer.send_message_in_transaction(Message("BenchCheck", body), lambda m, a: unknown),
            pending - 1,
            64,
        )
        total = 1 + (pending - 1) // 64 * 64
        print(f"  {total} half messages sent; waiting for the check-back", flush=True)
        deadline = trio.current_time() + 300
        while True:
            table = await broker_figures(namesrv)
            committed = int(table.get("transactionCommitted", "0")) - before
            if committed >= total:
                break
            if trio.current_time() > deadline:
                shown = {k: v for k, v in table.items() if k.startswith("transaction")}
                raise SystemExit(f"check-back did not resolve {total} transactions in 300 s: {shown}")
            await trio.sleep(0.05)
        done = time.perf_counter()
    elapsed = done - first_check[0]
    return total / elapsed, elapsed


async def workloads(namesrv: str, args: argparse.Namespace) -> dict[str, float]:
    body = os.urandom(args.size // 2).hex().encode()[: args.size]
    out: dict[str, float] = {}
    for in_flight in (1, 64):
        total = args.messages if in_flight == 64 else max(1000, args.messages // 10)
        print(f"  {in_flight} in flight: plain sends ...", flush=True)
        out[f"plain {in_flight}"] = await plain_rate(namesrv, body, total, in_flight)
        print(f"  {in_flight} in flight: transactions ...", flush=True)
        out[f"tx {in_flight}"] = await transaction_rate(namesrv, body, total, in_flight)
    print("  check-back ...", flush=True)
    out["check-back"], out["check-back s"] = await check_back_rate(namesrv, body, args.pending)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000, help="transactions (and plain sends) at 64")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--flush", default="async", choices=["async", "sync"])
    args = parser.parse_args()
    tables = (
        '[transaction]\ncheck_interval = "1s"\ntimeout = "1s"\n'
        '[store_mmap]\ncommit_log_file_size = "256MiB"\n'
    )
    with tempfile.TemporaryDirectory(prefix="bench-tx-") as root:
        print(f"trocket up ({args.flush} flush), {args.size} B bodies", flush=True)
        with running_trocket(Path(root), f'flush = "{args.flush}"', tables) as namesrv:
            figures = trio.run(workloads, namesrv, args)
    print()
    print(f"{'workload':<28}{'rate/s':>12}{'vs plain':>10}")
    for in_flight in (1, 64):
        plain, tx = figures[f"plain {in_flight}"], figures[f"tx {in_flight}"]
        print(f"{'plain sends, ' + str(in_flight) + ' in flight':<28}{plain:>12,.0f}{'1.00x':>10}")
        print(f"{'transactions, ' + str(in_flight) + ' in flight':<28}{tx:>12,.0f}{tx / plain:>9.2f}x")
    print(
        f"{'check-back (pending halves)':<28}{figures['check-back']:>12,.0f}"
        f"   ({figures['check-back s']:.2f} s)"
    )
    ratio = figures["tx 64"] / figures["plain 64"]
    verdict = "met" if ratio >= TARGET_RATIO_64 else "MISSED"
    print(
        f"\ntarget: transactions >= {TARGET_RATIO_64:.0%} of plain sends at 64 in flight: "
        f"{ratio:.0%} ({verdict})"
    )


if __name__ == "__main__":
    main()
