"""Alternating A/B of the broker's send path: this tree's broker against another revision's.

Why it exists: on this machine kind a one-in-flight or many-producer rate drifts by 10-20 %
within an hour for the same code (docs/performance.md), so a change to the broker is judged
only against its baseline measured in the same run, the two arms alternating. The client (the
SDK of this tree) is the same for both arms; only the broker process runs the other revision
(checked out with ``git worktree`` into a temporary directory and removed after).

    ./run bench ab_sends --base HEAD~1 [--workload one|producers|inflight|batch] [--flush async|sync]
                         [--pairs 4] [--messages 40000] [--size 128] [--remoting 'busy_poll = "off"']

Workloads: ``one``: one producer, one send in flight (msgs/s, p50, p99); ``producers``: 64
producers on their own connections, one send in flight each, not polling; ``inflight``: one
producer with 64 sends in flight; ``batch``: batches of 32, one in flight. Each arm prints
messages a second and the broker's CPU microseconds a message; the summary gives each arm's
median and the ratio this tree / base.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import cpu_seconds, trocket_process  # noqa: E402
from trocket import Message, Producer  # noqa: E402

PRODUCERS = 64
WARM_SENDS = 2_000


class Meter:
    """The timed part of a workload: wall time and the broker's CPU from :meth:`start`."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self._wall = self._cpu = 0.0

    def start(self) -> None:
        self._cpu, self._wall = cpu_seconds(self.broker_pid), time.perf_counter()

    def figures(self, messages: int) -> dict[str, float]:
        elapsed = time.perf_counter() - self._wall
        cpu = cpu_seconds(self.broker_pid) - self._cpu
        return {"msgs/s": messages / elapsed, "broker µs/msg": cpu / messages * 1e6}


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """``revision`` in a temporary worktree, with this tree's compiled codec when the sources
    it was built from are the same (else both arms run the pure codec, to stay comparable)."""
    root = Path(tempfile.mkdtemp(prefix="trocket-ab-"))
    tree = root / "tree"
    command = ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision]
    added = subprocess.run(command, capture_output=True, text=True)
    if added.returncode:
        shutil.rmtree(root, ignore_errors=True)
        raise SystemExit(f"cannot check out {revision!r}: {added.stderr.strip()}")
    try:
        codec = Path("wire/batch_codec")
        built = sorted((REPO / codec).glob("_compiled*.so"))
        same = (REPO / codec / "_compiled.pyx").read_bytes() == (tree / codec / "_compiled.pyx").read_bytes()
        if built and same:
            for library in built:
                shutil.copy2(library, tree / codec / library.name)
        else:
            os.environ["TROCKET_PURE_CODEC"] = "1"
            print("the codec's sources differ between the trees: both arms run the pure codec", flush=True)
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


async def one(namesrv: str, topic: str, body: bytes, count: int, meter: Meter) -> dict[str, float]:
    async with Producer("PG_ab", namesrv, send_timeout=30) as producer:
        for _ in range(WARM_SENDS):
            await producer.send(Message(topic, body))
        latencies = []
        meter.start()
        for _ in range(count):
            sent = time.perf_counter()
            await producer.send(Message(topic, body))
            latencies.append(time.perf_counter() - sent)
        figures = meter.figures(count)
    latencies.sort()
    figures["p50 µs"] = latencies[len(latencies) // 2] * 1e6
    figures["p99 µs"] = latencies[int(len(latencies) * 0.99)] * 1e6
    return figures


async def producers(namesrv: str, topic: str, body: bytes, count: int, meter: Meter) -> dict[str, float]:
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(Producer("PG_ab", namesrv, send_timeout=30, busy_poll=0))
            for _ in range(PRODUCERS)
        ]
        for client in clients:
            for _ in range(WARM_SENDS // PRODUCERS):
                await client.send(Message(topic, body))
        each = count // PRODUCERS

        async def sender(client: Producer) -> None:
            for _ in range(each):
                await client.send(Message(topic, body))

        meter.start()
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(sender, client)
        return meter.figures(each * PRODUCERS)


async def inflight(namesrv: str, topic: str, body: bytes, count: int, meter: Meter) -> dict[str, float]:
    async with Producer("PG_ab", namesrv, send_timeout=30) as producer:
        for _ in range(WARM_SENDS):
            await producer.send(Message(topic, body))
        each = count // 64

        async def sender() -> None:
            for _ in range(each):
                await producer.send(Message(topic, body))

        meter.start()
        async with trio.open_nursery() as nursery:
            for _ in range(64):
                nursery.start_soon(sender)
        return meter.figures(each * 64)


async def batch(namesrv: str, topic: str, body: bytes, count: int, meter: Meter) -> dict[str, float]:
    async with Producer("PG_ab", namesrv, send_timeout=30) as producer:
        messages = [Message(topic, body) for _ in range(32)]
        for _ in range(WARM_SENDS // 32):
            await producer.send_batch(messages)
        rounds = count // 32
        meter.start()
        for _ in range(rounds):
            await producer.send_batch(messages)
        return meter.figures(rounds * 32)


WORKLOADS = {"one": one, "producers": producers, "inflight": inflight, "batch": batch}


def run_arm(tree: Path, args: argparse.Namespace, body: bytes) -> dict[str, float]:
    remoting = "\n".join(args.remoting)
    store = 'commit_log_file_size = "512MiB"\n'
    if args.flush == "sync":
        store += "warm_mapped_file = true\n"  # as produce_consume runs sync flush
    with tempfile.TemporaryDirectory(prefix="trocket-ab-run-") as root:
        tables = f"[remoting]\n{remoting}\n[store_mmap]\n{store}"
        with trocket_process(Path(root), f'flush = "{args.flush}"', tables, repo=tree) as broker:
            workload = WORKLOADS[args.workload]
            return trio.run(workload, broker.namesrv, "ABTopic", body, args.messages, Meter(broker.pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="one")
    parser.add_argument("--flush", choices=("async", "sync"), default="async")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument(
        "--remoting", action="append", default=[], help="a line for [remoting] of both brokers (repeatable)"
    )
    args = parser.parse_args()
    if args.pairs < 1 or args.messages < PRODUCERS:
        parser.error(f"--pairs must be at least 1 and --messages at least {PRODUCERS}")
    body = os.urandom(args.size // 2).hex().encode()[: args.size]
    results: dict[str, list[dict[str, float]]] = {"base": [], "this tree": []}
    with checkout(args.base) as base_tree:
        print(f"{args.workload}, {args.flush} flush, {args.size} B, {args.messages} messages an arm, "
              f"base {args.base}", flush=True)  # fmt: skip
        for pair in range(args.pairs):
            # Alternate which arm goes first: the machine's drift then falls on both.
            arms = [("base", base_tree), ("this tree", REPO)]
            for name, tree in arms if pair % 2 == 0 else arms[::-1]:
                figures = run_arm(tree, args, body)
                results[name].append(figures)
                shown = "  ".join(f"{key} {value:,.1f}" for key, value in figures.items())
                print(f"pair {pair + 1} {name:>9}: {shown}", flush=True)
    print("median (range):")
    for key in results["base"][0]:
        medians = {}
        for name, runs in results.items():
            values = [run[key] for run in runs]
            medians[name] = statistics.median(values)
            print(f"  {key:>14} {name:>9}: {medians[name]:,.1f} ({min(values):,.1f}-{max(values):,.1f})")
        print(f"  {key:>14}     ratio: {medians['this tree'] / medians['base']:.3f} (this tree / base)")


if __name__ == "__main__":
    main()
