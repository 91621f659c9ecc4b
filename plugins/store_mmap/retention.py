"""Retention and disk self-protection (RocketMQ's CleanCommitLogService and disk checks).

Every ``clean_interval``:

* above ``disk_space_warning_level_ratio`` (90 %) the store refuses writes with a "disk full"
  status while reads continue; the flag clears when usage drops;
* at the ``delete_when`` hours, or at any hour above ``disk_max_used_space_ratio`` (75 %), the
  leading run of commit-log files older than ``file_reserved_time`` is deleted (at most
  ``delete_files_per_run``, stopping at the first unexpired file); above
  ``disk_space_clean_forcibly_ratio`` (85 %) unexpired files go too. The file being written
  and files not yet dispatched are never deleted;
* consume-queue and index files wholly below the new log minimum are removed and queue
  minimum offsets move up.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from plugins.store_mmap.config import StoreMmapConfig

log = logging.getLogger(__name__)


def disk_used_ratio(path: Path) -> float:
    """Disk use as ``df`` reports it (its Use% column): used blocks over the blocks this
    process can ever hold, used plus available.

    ``(total - available) / total`` would count the filesystem's reserved blocks (root's 5 %,
    or far more on volumes with quotas or thin provisioning) as used, so a half-empty disk
    could read as 80 % full and trigger forced deletion of unexpired files.
    """
    stats = os.statvfs(path)
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    available = stats.f_bavail * stats.f_frsize
    return used / (used + available) if used + available else 0.0


def delete_hours(spec: str) -> set[int]:
    hours = set()
    for part in spec.replace(",", ";").split(";"):
        part = part.strip()
        if part.isdigit() and 0 <= int(part) <= 23:
            hours.add(int(part))
    return hours


@attrs.frozen
class RetentionReport:
    used_ratio: float
    disk_full: bool
    trigger: str
    """Why files were considered ("time", "space", "forced", "manual") or "" for none."""
    deleted_files: tuple[str, ...]


@attrs.define(eq=False)
class RetentionService:
    store: Any  # MmapStore; typed loosely to avoid an import cycle with store.py
    config: StoreMmapConfig
    clock: Callable[[], float] = time.time
    used_ratio: Callable[[Path], float] = disk_used_ratio
    manual_runs: int = 0
    """Set by an admin "delete expired files now" request: that many runs delete expired files."""
    checks: int = 0
    """Checks performed since start."""

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Check and clean every ``clean_interval`` until cancelled."""
        self.check_once()
        task_status.started()
        while True:
            await trio.sleep(self.config.clean_interval)
            self.check_once()

    def check_once(self) -> RetentionReport:
        self.checks += 1
        store = self.store
        commit_log = store.commit_log
        directory = commit_log.files.directory
        ratio = self.used_ratio(directory)
        percent = ratio * 100
        if percent >= self.config.disk_space_warning_level_ratio:
            if not commit_log.disk_full_reason:
                log.error("disk full: %.1f%% of %s used; refusing writes", percent, directory)
            commit_log.disk_full_reason = (
                f"disk full: {percent:.1f}% of the disk holding {directory} is used "
                f"(limit {self.config.disk_space_warning_level_ratio}%); writes are refused, reads continue"
            )
        elif commit_log.disk_full_reason:
            log.warning("disk usage back to %.1f%%; accepting writes again", percent)
            commit_log.disk_full_reason = ""
        forced = (
            self.config.clean_file_forcibly_enable and percent >= self.config.disk_space_clean_forcibly_ratio
        )
        trigger = ""
        if self.manual_runs:
            self.manual_runs -= 1
            trigger = "manual"
        if time.localtime(self.clock()).tm_hour in delete_hours(self.config.delete_when):
            trigger = trigger or "time"
        if percent >= self.config.disk_max_used_space_ratio:
            trigger = "forced" if forced else (trigger or "space")
        deleted: tuple[str, ...] = ()
        if trigger:
            deleted = tuple(self._delete_expired(ignore_expiry=trigger == "forced"))
        return RetentionReport(ratio, bool(commit_log.disk_full_reason), trigger, deleted)

    def _delete_expired(self, *, ignore_expiry: bool) -> list[str]:
        store = self.store
        files = store.commit_log.files
        wrote = store.positions.wrote.value
        dispatched = store.queues.dispatched_offset()
        now = self.clock()
        count = 0
        for mapped in files.files:
            if count >= self.config.delete_files_per_run:
                break
            if mapped.end > min(wrote, dispatched):
                break  # the active file, pre-allocated ones, or not yet in the consume queues
            age = now - mapped.path.stat().st_mtime
            if not ignore_expiry and age < self.config.file_reserved_time:
                break
            count += 1
        if not count:
            return []
        names = [m.path.name for m in files.files[:count]]
        store.delete_log_head(count)
        log.info("retention deleted %d commit-log files: %s", count, ", ".join(names))
        return names
