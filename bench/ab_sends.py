"""Alternating A/B of the broker's send path: this tree's broker against another revision's.

Why it exists: on this machine kind a one-in-flight or many-producer rate drifts by 10-20 %
within an hour for the same code (docs/performance.md), so a change to the broker is judged
only against its baseline measured in the same run, the two arms alternating. The client (the
SDK of this tree) is the same for both arms; only the broker process runs the other revision
(checked out with ``git worktree`` into a temporary directory and removed after); this tree's
broker runs from a checkout too, of its tracked files as they are (``git stash create``;
untracked files are not in it): from the repository itself a broker measured 3-6 % faster than
the same code from a checkout, which would pass for an improvement.

    ./run bench ab_sends --base HEAD~1 [--workload one|producers|inflight|batch] [--flush async|sync]
                         [--pairs 4] [--messages 40000] [--size 128] [--remoting 'busy_poll = "off"']
    ./run bench ab_sends --base HEAD~1 --interleave [--blocks 200] [--messages 20000] ...

``--interleave`` (one in flight only) runs both brokers at once and one client that switches
between them every ``--blocks``-th of the sends (a few tenths of a second): the machine's drift,
which moves whole runs by 10-30 % here, then falls on both arms within each second, and a 5 %
change that separate runs cannot resolve shows in every run (docs/performance.md, thirty-fifth
step). It prints each arm's mean, p50 and p99 round trip and their ratios; the idle arm's
broker stops polling between its blocks, as an idle broker does.

Workloads, each a row of ``produce_consume`` measured the same way (its functions where it has
them): ``one``: one producer, one send in flight ("1 in flight", p50, p99); ``producers``: 64
producers on their own connections, one send in flight each, not polling; ``inflight``: one
producer with 64 sends in flight; ``batch``: batches of 32, one in flight. Each run prints its
figures (``cpu ...``: the broker's CPU microseconds a message); the summary gives each arm's
median and range and the ratio this tree / base.
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
import zipfile
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.produce_consume import (  # noqa: E402
    PRODUCERS,
    Figures,
    Server,
    cpu_per_message,
    many_producers,
    one_in_flight,
    warming_done,
)
from bench.trocket_process import trocket_process  # noqa: E402
from trocket import Message, Producer  # noqa: E402

WARM_SENDS = 2_000
"""Sends before a measured one-in-flight or batch run (the interpreter and caches warm)."""


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """``revision`` in a temporary worktree, with its compiled codec: this tree's when the
    sources it was built from are the same, else built for it (``pip wheel``, about a minute);
    when that cannot be done both arms run the pure codec, to stay comparable."""
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
        elif not built or not build_codec(tree, root / "wheel"):
            os.environ["TROCKET_PURE_CODEC"] = "1"
            print("the codec could not be built for both trees: both arms run the pure codec", flush=True)
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


def working_tree_commit() -> str:
    """A commit of the working tree's tracked files as they are (``git stash create``; HEAD
    when nothing is changed); untracked files are not in it."""
    created = subprocess.run(["git", "-C", str(REPO), "stash", "create"], capture_output=True, text=True)
    return created.stdout.strip() or "HEAD"


def build_codec(tree: Path, wheels: Path) -> bool:
    """Build ``tree``'s compiled codec (a wheel of the tree, from which the extension is
    taken into it); False when pip fails."""
    print(f"building the codec of {tree.name} (pip wheel)...", flush=True)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheels)]
    command.append(str(tree))
    if subprocess.run(command, capture_output=True, text=True).returncode:
        return False
    for wheel in wheels.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith("wire/batch_codec/_compiled") and name.endswith(".so"):
                    (tree / name).write_bytes(archive.read(name))
                    return True
    return False


async def warm(producer: Producer, topic: str, body: bytes) -> None:
    """``WARM_SENDS`` sends one after another: routes, connection, interpreter and caches warm."""
    for _ in range(WARM_SENDS):
        await producer.send(Message(topic, body))


async def one(server: Server, topic: str, body: bytes, count: int) -> Figures:
    """The bench's one-in-flight rows (``produce_consume.one_in_flight``), after a warm-up."""
    async with Producer("PG_ab", server.address, send_timeout=30) as producer:
        await warm(producer, topic, body)
        return await one_in_flight(producer, server, topic, body, count)


async def producers(server: Server, topic: str, body: bytes, count: int) -> Figures:
    """The bench's "64 producers" row (``produce_consume.many_producers``), after a warm-up
    by one producer (the log's first file created and, under sync flush, warmed)."""
    async with Producer("PG_ab", server.address, send_timeout=30) as producer:
        await warm(producer, topic, body)
    await warming_done(server)
    return await many_producers(server, topic, body, count)


async def inflight(server: Server, topic: str, body: bytes, count: int) -> Figures:
    """The bench's "64 in flight" row: one producer, 64 sends in flight on its connection."""
    async with Producer("PG_ab", server.address, send_timeout=30) as producer:
        await warm(producer, topic, body)
        await warming_done(server)
        each = count // 64

        async def sender() -> None:
            for _ in range(each):
                await producer.send(Message(topic, body))

        cpu, started = server.cpu(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(64):
                nursery.start_soon(sender)
        return {
            "64 in flight": each * 64 / (time.perf_counter() - started),
            "cpu 64 in flight": cpu_per_message(server, cpu, each * 64),
        }


async def batch(server: Server, topic: str, body: bytes, count: int) -> Figures:
    """The bench's "batch 32" row: batches of 32, one in flight."""
    async with Producer("PG_ab", server.address, send_timeout=30) as producer:
        messages = [Message(topic, body) for _ in range(32)]
        for _ in range(WARM_SENDS // 32):
            await producer.send_batch(messages)
        await warming_done(server)
        rounds = count // 32
        cpu, started = server.cpu(), time.perf_counter()
        for _ in range(rounds):
            await producer.send_batch(messages)
        return {
            "batch 32": rounds * 32 / (time.perf_counter() - started),
            "cpu batch 32": cpu_per_message(server, cpu, rounds * 32),
        }


WORKLOADS = {"one": one, "producers": producers, "inflight": inflight, "batch": batch}

ARMS = ("base", "this tree")


async def interleaved(
    servers: dict[str, Server], body: bytes, count: int, blocks: int
) -> dict[str, list[float]]:
    """One producer per broker, one send in flight, the arms taking turns in ``blocks`` blocks
    each (alternating which goes first); every send's round trip in seconds, by arm."""
    latencies: dict[str, list[float]] = {name: [] for name in ARMS}
    async with AsyncExitStack() as stack:
        producers = {}
        for name in ARMS:
            producer = await stack.enter_async_context(
                Producer("PG_ab", servers[name].address, send_timeout=30)
            )
            await warm(producer, "ABTopic", body)
            await warming_done(servers[name])
            producers[name] = producer
        each = max(1, count // blocks)
        for block in range(blocks):
            for name in ARMS if block % 2 == 0 else ARMS[::-1]:
                producer, times = producers[name], latencies[name]
                for _ in range(each):
                    sent = time.perf_counter()
                    await producer.send(Message("ABTopic", body))
                    times.append(time.perf_counter() - sent)
    return latencies


def broker_tables(args: argparse.Namespace) -> str:
    """The config tables both arms' brokers run with: ``--remoting`` lines, and the store as
    produce_consume runs it (512 MiB log files; warmed ahead under sync flush)."""
    store = 'commit_log_file_size = "512MiB"\n'
    if args.flush == "sync":
        store += "warm_mapped_file = true\n"
    remoting = "\n".join(args.remoting)
    return f"[remoting]\n{remoting}\n[store_mmap]\n{store}"


def run_interleaved(base_tree: Path, this_tree: Path, args: argparse.Namespace, body: bytes) -> None:
    tables = broker_tables(args)
    trees = {"base": base_tree, "this tree": this_tree}
    with ExitStack() as stack:
        servers = {}
        for name in ARMS:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trocket-ab-run-")))
            broker = stack.enter_context(
                trocket_process(root, f'flush = "{args.flush}"', tables, repo=trees[name])
            )
            servers[name] = Server(broker.namesrv, broker.pid)
        latencies = trio.run(interleaved, servers, body, args.messages, args.blocks)
    figures = {}
    for name in ARMS:
        times = sorted(latencies[name])
        figures[name] = {
            "mean ms": statistics.fmean(times) * 1000,
            "p50 ms": times[len(times) // 2] * 1000,
            "p90 ms": times[int(len(times) * 0.9)] * 1000,
            "p99 ms": times[int(len(times) * 0.99)] * 1000,
        }
        shown = "  ".join(f"{key} {value:.3f}" for key, value in figures[name].items())
        print(f"{name:>9}: {len(times)} sends  {shown}", flush=True)
    for key in figures["base"]:
        print(f"  {key:>8} ratio: {figures['this tree'][key] / figures['base'][key]:.3f} (this tree / base)")


def run_arm(tree: Path, args: argparse.Namespace, body: bytes) -> Figures:
    with tempfile.TemporaryDirectory(prefix="trocket-ab-run-") as root:
        tables = broker_tables(args)
        with trocket_process(Path(root), f'flush = "{args.flush}"', tables, repo=tree) as broker:
            server = Server(broker.namesrv, broker.pid)
            return trio.run(WORKLOADS[args.workload], server, "ABTopic", body, args.messages)


def shown_value(value: float) -> str:
    """Rates with thousands separators, milliseconds with three decimals."""
    return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"


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
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="both brokers at once, the client switching between them (one)",
    )
    parser.add_argument("--blocks", type=int, default=200, help="--interleave: turns each arm takes")
    args = parser.parse_args()
    if args.pairs < 1 or args.messages < PRODUCERS:
        parser.error(f"--pairs must be at least 1 and --messages at least {PRODUCERS}")
    if args.interleave and (args.workload != "one" or not 1 <= args.blocks <= args.messages):
        parser.error("--interleave runs the one workload, with 1 <= --blocks <= --messages")
    body = os.urandom(args.size // 2).hex().encode()[: args.size]
    if args.interleave:
        with checkout(args.base) as base_tree, checkout(working_tree_commit()) as this_tree:
            print(f"one, interleaved, {args.flush} flush, {args.size} B, {args.messages} messages an arm "
                  f"in {args.blocks} turns, base {args.base}", flush=True)  # fmt: skip
            run_interleaved(base_tree, this_tree, args, body)
        return
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
    # Both arms run from checkouts: from the repository itself a broker measured 3-6 % faster
    # than the same code from a checkout (docs/performance.md, "Judging a change").
    with checkout(args.base) as base_tree, checkout(working_tree_commit()) as this_tree:
        print(f"{args.workload}, {args.flush} flush, {args.size} B, {args.messages} messages an arm, "
              f"base {args.base}", flush=True)  # fmt: skip
        for pair in range(args.pairs):
            # Alternate which arm goes first: the machine's drift then falls on both.
            arms = [("base", base_tree), ("this tree", this_tree)]
            for name, tree in arms if pair % 2 == 0 else arms[::-1]:
                figures = run_arm(tree, args, body)
                results[name].append(figures)
                shown = "  ".join(f"{key} {shown_value(value)}" for key, value in figures.items())
                print(f"pair {pair + 1} {name:>9}: {shown}", flush=True)
    print("median (range):")
    for key in results["base"][0]:
        medians = {}
        for name, runs in results.items():
            values = [run[key] for run in runs]
            medians[name] = statistics.median(values)
            spread = f"{shown_value(min(values))}-{shown_value(max(values))}"
            print(f"  {key:>18} {name:>9}: {shown_value(medians[name])} ({spread})")
        print(f"  {key:>18}     ratio: {medians['this tree'] / medians['base']:.3f} (this tree / base)")


if __name__ == "__main__":
    main()
