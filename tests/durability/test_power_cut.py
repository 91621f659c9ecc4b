"""Power-cut simulation on a loop-mounted ext4 image (see kernel.testing.power_cut): under sync
flush no acknowledged message is ever lost; under async flush every loss lies beyond the
flushed position reported before the cut; under both, nothing corrupt or duplicated is served."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.testing.power_cut import PowerCutRun, unavailable_reason
from plugins.store_mmap.config import small_image_table

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def store_tables(flush: str, **store_mmap: Any) -> dict[str, Any]:
    """Config tables for a store_mmap broker sized for an image of a few hundred MiB (small
    commit-log files, a small index, forced cleaning off), with ``flush`` as the policy."""
    broker = {"plugins": ["store_mmap", "flush_sync", "flush_async"], "flush": flush}
    return {"broker": broker, "store_mmap": small_image_table(**store_mmap)}


def _cut_many(tmp_path, tables: dict, cuts: int):
    results = []
    with PowerCutRun(tmp_path, tables).running() as run:
        for _ in range(cuts):
            result = run.cut_and_verify()
            assert not result.clean_recovery, "a cut must look like a crash (abort marker present)"
            assert result.corrupt == (), result.corrupt
            assert result.duplicates == 0
            results.append(result)
    assert results[-1].acked > 0, "the writer was under load"
    return results


@pytest.mark.parametrize("write_path", ["pwrite", "buffered"])
def test_sync_flush_loses_no_acknowledged_message_across_twenty_cuts(tmp_path, write_path):
    results = _cut_many(tmp_path, store_tables("sync", write_path=write_path), cuts=20)
    for result in results:
        assert result.lost == (), f"cut {result.number}: {len(result.lost)} acknowledged messages lost"


def test_async_flush_losses_lie_in_the_unflushed_window(tmp_path):
    results = _cut_many(tmp_path, store_tables("async"), cuts=10)
    for result in results:
        assert result.lost_below_flushed == (), (
            f"cut {result.number}: lost messages below the flushed position {result.flushed_bound}"
        )
        assert result.holes == 0, f"cut {result.number}: survivors after a lost message"
