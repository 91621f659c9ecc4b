"""How fast the ``trocket`` pytest plugin's broker is there: an embedded broker and NameServer
(``trocket.testing.BrokerThread``) started, crashed and restarted, and stopped, against
``trocket up`` as a separate process measured in the same run (what a test would otherwise
start). The target (issue 41): start-up under 0.5 s.

    ./run bench embedded_broker [--rounds 10]
"""

from __future__ import annotations

import argparse
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
from trocket.testing import BrokerThread  # noqa: E402

TARGET_START = 0.5


async def first_send(namesrv: str) -> None:
    async with Producer("PG_bench_embedded", namesrv) as producer:
        await producer.send(Message("BenchEmbedded", b"hello"))


def embedded_round(root: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    host = BrokerThread(root)
    started = time.perf_counter()
    host.start()
    figures["start"] = time.perf_counter() - started
    started = time.perf_counter()
    trio.run(first_send, host.namesrv_addr)
    figures["first send"] = time.perf_counter() - started
    started = time.perf_counter()
    host.restart(crash=True)
    figures["crash + restart"] = time.perf_counter() - started
    started = time.perf_counter()
    host.stop()
    figures["stop"] = time.perf_counter() - started
    return figures


def process_round(root: Path) -> float:
    root.mkdir()
    started = time.perf_counter()
    with running_trocket(root):
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    embedded: dict[str, list[float]] = {}
    processes: list[float] = []
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-embedded-") as root:
            for name, seconds in embedded_round(Path(root) / "embedded").items():
                embedded.setdefault(name, []).append(seconds)
            processes.append(process_round(Path(root) / "process"))
        print(f"  round {round_ + 1}: embedded start {embedded['start'][-1]:.3f}s, "
              f"trocket up {processes[-1]:.3f}s", flush=True)  # fmt: skip
    process = statistics.median(processes)
    print()
    print(f"{'step (median of ' + str(args.rounds) + ')':<32}{'seconds':>10}{'vs trocket up start':>22}")
    for name, values in embedded.items():
        median = statistics.median(values)
        print(f"{'embedded ' + name:<32}{median:>10.3f}{median / process:>21.2f}x")
    print(f"{'trocket up (a process) start':<32}{process:>10.3f}{1:>21.2f}x")
    start = statistics.median(embedded["start"])
    verdict = "met" if start < TARGET_START else "MISSED"
    print(f"\ntarget: embedded start-up under {TARGET_START}s: {start:.3f}s ({verdict})")


if __name__ == "__main__":
    main()
