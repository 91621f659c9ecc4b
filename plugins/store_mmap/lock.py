"""The store's ``lock`` file, held with an exclusive ``flock`` while the store is open.

flock locks belong to the open file description, so a second store on the same directory is
refused whether it is in another process or in this one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import attrs

from kernel.errors import StoreLocked


@attrs.define(eq=False)
class StoreLock:
    path: Path
    _fd: int = attrs.field(default=-1, init=False)

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(
                f"{self.path} is locked: another broker is using this store directory"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
