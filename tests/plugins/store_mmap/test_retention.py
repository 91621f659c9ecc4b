"""Retention by time, space and force; disk-full write refusal; ENOSPC on a tiny filesystem."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from kernel import pull
from kernel.errors import StoreNotWritable
from kernel.model import GetStatus
from plugins.store_mmap.retention import RetentionService

from .helpers import clean_close, messages, opened

EVERY_HOUR = ";".join(f"{hour:02d}" for hour in range(24))
"""``deleteWhen`` that is always now: a test must not depend on the hour it runs in (CI once
crossed an hour boundary between import and run)."""
OTHER_HOUR = f"{(time.localtime().tm_hour + 12) % 24:02d}"


async def filled(store, batches: int = 30) -> None:
    for i in range(batches):
        await store.append(messages("T", 0, 2, start=i * 2))
    await clean_close(store)


def age_files(root, count: int, hours: float = 100) -> list[str]:
    files = sorted((root / "commitlog").iterdir())[:count]
    old = time.time() - hours * 3600
    for path in files:
        os.utime(path, (old, old))
    return [p.name for p in files]


def service(store, used: float, **config_changes) -> RetentionService:
    import attrs

    config = attrs.evolve(store.config, **config_changes)
    return RetentionService(store, config, used_ratio=lambda path: used)


@pytest.mark.parametrize("pooled", [0, 204], ids=["own-files", "pooled"])
async def test_time_based_deletes_the_leading_expired_run_and_follows_with_queues(tmp_path, pooled):
    async with opened(tmp_path, delete_when=EVERY_HOUR, pooled_queue_entries=pooled) as (store, _):
        await filled(store)
        total = len(store.commit_log.files.files)
        aged = age_files(tmp_path, 4)
        # File 2 is young again: only the leading run (files 0 and 1) may go.
        young = tmp_path / "commitlog" / aged[2]
        os.utime(young, (time.time(), time.time()))
        report = service(store, used=0.3).check_once()
        assert report.trigger == "time" and list(report.deleted_files) == aged[:2]
        assert len(store.commit_log.files.files) == total - 2
        log_min = store.commit_log.files.min_offset
        assert log_min == int(aged[2])
        min_offset = store.min_queue_offset("T", 0)
        assert min_offset > 0
        assert (await pull.get_messages(store, "T", 0, 0)).status is GetStatus.OFFSET_TOO_SMALL
        got = await pull.get_messages(store, "T", 0, min_offset)
        assert got.status is GetStatus.FOUND
        if not pooled:
            cq_files = sorted((tmp_path / "consumequeue" / "T" / "0").iterdir())
            assert int(cq_files[0].name) // 20 <= min_offset


async def test_outside_the_hour_nothing_is_deleted_unless_space_is_short(tmp_path):
    async with opened(tmp_path, delete_when=OTHER_HOUR) as (store, _):
        await filled(store)
        age_files(tmp_path, 3)
        quiet = service(store, used=0.5).check_once()
        assert quiet.trigger == "" and quiet.deleted_files == ()
        space = service(store, used=0.8).check_once()
        assert space.trigger == "space" and len(space.deleted_files) == 3


async def test_forced_deletion_takes_unexpired_files_but_never_the_active_one(tmp_path):
    async with opened(tmp_path, delete_when=OTHER_HOUR) as (store, _):
        await filled(store)
        active_start = store.commit_log.files.find(store.positions.wrote.value - 1).start
        report = service(store, used=0.86, delete_files_per_run=100).check_once()
        assert report.trigger == "forced" and report.deleted_files
        assert store.commit_log.files.min_offset == active_start


async def test_at_most_n_files_per_run(tmp_path):
    async with opened(tmp_path, delete_when=EVERY_HOUR) as (store, _):
        await filled(store)
        age_files(tmp_path, 6)
        report = service(store, used=0.3, delete_files_per_run=2).check_once()
        assert len(report.deleted_files) == 2


async def test_disk_full_refuses_writes_and_recovers(tmp_path):
    async with opened(tmp_path, delete_when=OTHER_HOUR) as (store, _):
        await filled(store, batches=3)
        full = service(store, used=0.95).check_once()
        assert full.disk_full
        with pytest.raises(StoreNotWritable, match="disk full"):
            await store.append(messages("T", 0, 1))
        assert (await pull.get_messages(store, "T", 0, 0)).status is GetStatus.FOUND, "reads continue"
        assert not service(store, used=0.5).check_once().disk_full
        assert (await store.append(messages("T", 0, 1, start=6))).queue_offsets == [6]


def _mount_tmpfs(path, size: str) -> bool:
    path.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return result.returncode == 0


@pytest.fixture
def tiny_filesystem(tmp_path):
    mount = tmp_path / "tiny"
    if not _mount_tmpfs(mount, "40k"):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    yield mount
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)  # still busy: detach now


async def test_enospc_refuses_writes_cleanly_and_reads_continue(tiny_filesystem, tmp_path):
    """The commit log on its own small disk (storePathCommitLog) fills up."""
    mount = tiny_filesystem
    commit_log = str(mount / "commitlog")
    async with opened(tmp_path / "store", commit_log_dir=commit_log) as (store, _):
        acked = []
        with pytest.raises(StoreNotWritable, match="disk full\\? nothing was written") as caught:
            for i in range(1000):
                acked.append(await store.append(messages("T", 0, 1, start=i)))
        assert "No space left" in str(caught.value.__cause__)
        wrote = store.positions.wrote.value
        assert wrote == acked[-1].end_offset, "no position moved past what was written"
        await clean_close(store)
        got = await pull.get_messages(store, "T", 0, 0, max_count=2000)
        assert len(got.records) == len(acked)
    async with opened(tmp_path / "store", commit_log_dir=commit_log) as (store, report):
        assert report.log_max_offset == wrote
        assert store.max_queue_offset("T", 0) == len(acked)


async def test_index_allocation_failure_degrades_indexing_without_crashing(tiny_filesystem, tmp_path):
    """Index files on a full disk: no SIGBUS, the log and consume queues keep working."""
    import shutil

    (tmp_path / "store").mkdir()
    index_dir = tiny_filesystem / "index"
    index_dir.mkdir()
    (tmp_path / "store" / "index").symlink_to(index_dir)
    filler = tiny_filesystem / "filler"
    filler.write_bytes(b"x" * (36 * 1024))
    async with opened(tmp_path / "store", index_hash_slots=256, index_max_entries=256) as (store, _):
        await store.append(messages("T", 0, 5))
        await clean_close(store)
        assert store.index.degraded.startswith("index file allocation failed")
        assert store.max_queue_offset("T", 0) == 5
        assert await store.query_by_key("T", "key1") == []
        filler.unlink()
        await store.append(messages("T", 0, 1, start=5))
        await clean_close(store)
        assert store.index.degraded == ""
        assert len(await store.query_by_key("T", "key5")) == 1
    shutil.rmtree(tmp_path / "store" / "index", ignore_errors=True)


async def test_the_broker_runs_retention_for_its_mmap_store(tmp_path):
    """The store brings its own retention service, also when `store` is not named in config."""
    import trio

    from kernel import Broker
    from kernel.testing import make_config

    config = make_config(
        broker={"plugins": ["store_mmap", "flush_async"], "data_dir": str(tmp_path), "store": None},
        store_mmap={"commit_log_file_size": 4096, "clean_interval": "10ms"},
    )
    broker = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await trio.sleep(0.1)
        assert broker.store.retention.checks >= 2
        broker.request_stop()


def test_disk_use_is_measured_as_df_reports_it(tmp_path):
    """Blocks reserved for root (or withheld by quotas) are not "used": counting them once made
    a half-empty CI disk look 85 % full and forced deletion of unexpired commit-log files."""
    from plugins.store_mmap.retention import disk_used_ratio

    columns = subprocess.run(["df", "-P", str(tmp_path)], capture_output=True, text=True, check=True)
    used_kib, available_kib = (int(v) for v in columns.stdout.splitlines()[1].split()[2:4])
    expected = used_kib / (used_kib + available_kib)
    assert disk_used_ratio(tmp_path) == pytest.approx(expected, abs=0.01)
