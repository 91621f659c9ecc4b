"""What an acknowledged message survives when the machine dies, measured (docs/durability.md).

Two experiments on a loop-mounted ext4 image (kernel.testing.power_cut), for each policy:

1. Seed 000's scenario: one producer sends one message a second; after ``--seconds`` the
   machine "loses power". Prints how many acknowledged messages survived and how old the
   oldest lost one was.
2. Under load (8 producers as fast as acknowledged): ``--cuts`` cuts at random moments.
   Prints acknowledged/lost per cut, the loss window in ms and bytes beyond the flushed
   position, and the worst case. The baseline is the sync policy measured in the same run:
   its loss must be zero.

    ./run bench power_cut [--seconds 15] [--cuts 10]

Needs root and loop devices (it says so and exits 2 otherwise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from kernel.testing.power_cut import CutResult, PowerCutRun, unavailable_reason
from plugins.store_mmap.config import small_image_table

POLICIES = ("sync", "async")


def tables(flush: str, write_path: str = "pwrite") -> dict:
    """A store_mmap broker sized for an image of a few hundred MiB, ``flush`` as its policy."""
    broker = {"plugins": ["store_mmap", "flush_sync", "flush_async"], "flush": flush}
    store = small_image_table(commit_log_file_size="4MiB", write_path=write_path)
    return {"broker": broker, "store_mmap": store}


def seed_000(base: Path, flush: str, seconds: float) -> CutResult:
    run = PowerCutRun(base / f"seed-{flush}", tables(flush), producers=1, queues=1, rate=1.0)
    with run.running():
        run.run_for(seconds)
        return run.cut_and_verify(min_run=0, max_run=0)


def loaded(base: Path, flush: str, write_path: str, cuts: int) -> list[CutResult]:
    run = PowerCutRun(base / f"load-{flush}-{write_path}", tables(flush, write_path))
    with run.running():
        return [run.cut_and_verify(min_run=0.2, max_run=1.0) for _ in range(cuts)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="seed-000 scenario length")
    parser.add_argument("--cuts", type=int, default=10, help="cuts under load per policy")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"power_cut: skipped: {reason}")
        return 2
    with tempfile.TemporaryDirectory(prefix="trocket-power-cut-") as tmp:
        base = Path(tmp)
        print(f"seed 000: 1 msg/s for {args.seconds:.0f}s, then power loss (default flush settings)")
        print(f"{'policy':7} {'acked':>6} {'survived':>8} {'lost':>5} {'oldest lost (s)':>16}")
        for flush in POLICIES:
            r = seed_000(base, flush, args.seconds)
            print(f"{flush:7} {r.acked:>6} {r.survived:>8} {len(r.lost):>5} {r.loss_window_ms / 1000:>16.1f}")
        print()
        print(f"under load: 8 producers, {args.cuts} cuts at random moments")
        print(
            f"{'policy':16} {'acked':>8} {'lost':>7} {'lost %':>7} {'window p50/max ms':>18} "
            f"{'below flushed':>13} {'corrupt':>7} {'dups':>5}"
        )
        for flush, write_path in (("sync", "pwrite"), ("sync", "buffered"), ("async", "pwrite")):
            results = loaded(base, flush, write_path, args.cuts)
            acked = sum(r.acked for r in results)
            lost = sum(len(r.lost) for r in results)
            windows = [r.loss_window_ms for r in results]
            below = sum(len(r.lost_below_flushed) for r in results)
            corrupt = sum(len(r.corrupt) for r in results)
            dups = sum(r.duplicates for r in results)
            print(
                f"{flush + '/' + write_path:16} {acked:>8} {lost:>7} {100 * lost / max(acked, 1):>6.2f}% "
                f"{statistics.median(windows):>8.0f}/{max(windows):<9.0f} {below:>13} {corrupt:>7} {dups:>5}"
            )
        print()
        print("acked = acknowledgements printed before each cut, summed over cuts (they accumulate);")
        print("window = how long before the cut the oldest lost message was acknowledged.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
