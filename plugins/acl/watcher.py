"""Re-reads ``plain_acl.yml`` when it changes, so a permission granted or revoked applies to
the next request without a restart. A file that no longer parses is reported and the last good
one stays in force (a half-written edit must not open or close the broker)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import attrs
import trio

from plugins.acl.guard import AclGuard
from plugins.acl.plain_acl import AclFileError, read_plain_acl

log = logging.getLogger(__name__)


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


@attrs.define(eq=False)
class AclFileWatcher:
    path: Path
    guard: AclGuard
    interval: float
    reloads: int = 0
    last_error: str = ""
    _stamp: tuple[int, int, int] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._stamp = _file_stamp(self.path)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self.interval)
            await self.reload_if_changed()

    async def reload_if_changed(self) -> bool:
        """Whether a changed file was read and put in force."""
        stamp = await trio.to_thread.run_sync(_file_stamp, self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            acl = await trio.to_thread.run_sync(read_plain_acl, self.path)
        except AclFileError as error:
            return self._keep_last_good(str(error))
        except Exception as error:  # noqa: BLE001 - a file must never end the broker
            return self._keep_last_good(f"{self.path}: cannot be used: {type(error).__name__}: {error}")
        self.guard.acl = acl
        self.reloads += 1
        self.last_error = ""
        log.info("ACL: %s reloaded (%d accounts)", self.path, len(acl.accounts))
        return True

    def _keep_last_good(self, reason: str) -> bool:
        self.last_error = reason
        log.warning("ACL: %s; the last good file stays in force", reason)
        return False

    def figures(self) -> dict[str, str]:
        return {
            "aclFile": os.fspath(self.path),
            "aclAccounts": str(len(self.guard.acl.accounts)),
            "aclReloads": str(self.reloads),
            "aclAllowed": str(self.guard.stats.allowed),
            "aclRefused": str(self.guard.stats.refused),
            "aclLastError": self.last_error,
        }
