"""acme_audit: an audit trail of every message the broker stores, in a file beside the store.

    [broker]
    plugins = ["store_mmap", "flush_async", "remoting", "namesrv", "acme_audit"]

    [acme_audit]
    topics = []          # topics to audit; empty: every topic

``<data_dir>/acme_audit/audit.log`` holds one line per stored record, in log order::

    <log offset> <store time ms> <topic> <queue id> <queue offset> <msg id> <body bytes> <born host>

and ``<data_dir>/acme_audit/progress.json`` the log offset the file is complete up to.

It is a *derived view* (kernel.protocols.Dispatcher): the broker's dispatch loop feeds it every
stored record in log order, from the offset it says it has reached. What it relies on, and does:

* **Dispatch is sync and in memory.** ``dispatch`` only appends lines to a list; ``persist``
  writes them (called every ``view_persist_interval``, every
  ``view_persist_thorough_interval`` and at shutdown with ``thorough=True``).
* **Saving runs while dispatch goes on.** ``persist`` takes the pending lines and the offset
  they reach in one step before it awaits anything, so the progress it records is exactly what
  it wrote; a lock keeps two saves from interleaving.
* **The file is written before the progress.** After a crash the file may hold lines past the
  saved progress (written, progress not yet saved): at start they are dropped, because dispatch
  resumes at the saved progress and sends those records again. Lines are never duplicated nor
  lost.
* **A cut log.** When the log ends below the saved progress (recovery dropped a torn tail, or a
  slave its divergent one), the kernel calls ``truncate(end)``: lines at or past ``end`` go.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from kernel import BrokerContext, ConfigSection, DispatchRecord, hookimpl
from kernel.protocols import MessageStore

DIRECTORY = "acme_audit"


@attrs.frozen
class AuditConfig:
    """The ``[acme_audit]`` table."""

    topics: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """Topics to audit; empty: every topic."""


@attrs.frozen
class AuditLine:
    """One line of the audit file."""

    offset: int
    store_timestamp: int
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body_length: int
    born_host: str

    def text(self) -> str:
        return (
            f"{self.offset} {self.store_timestamp} {self.topic} {self.queue_id} {self.queue_offset} "
            f"{self.msg_id} {self.body_length} {self.born_host}\n"
        )

    @classmethod
    def parse(cls, line: str) -> AuditLine:
        offset, stored, topic, queue_id, queue_offset, msg_id, length, host = line.split()
        return cls(
            int(offset), int(stored), topic, int(queue_id), int(queue_offset), msg_id, int(length), host
        )


def read_audit(data_dir: Path) -> list[AuditLine]:
    """The audit file of a broker's data directory (what an auditor reads)."""
    path = data_dir / DIRECTORY / "audit.log"
    return [AuditLine.parse(line) for line in path.read_text().splitlines()] if path.exists() else []


class AuditView:
    """The view (see the module docstring)."""

    name = "acme_audit"

    def __init__(self, directory: Path, topics: Sequence[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.file = directory / "audit.log"
        self.progress_file = directory / "progress.json"
        self.topics = frozenset(topics)
        self._offset = (
            json.loads(self.progress_file.read_text())["offset"] if self.progress_file.exists() else 0
        )
        self._pending: list[str] = []
        self._saving = trio.Lock()
        self._cut_file(self._offset)  # lines written past the saved progress come again

    # --- kernel.protocols.Dispatcher ---------------------------------------------------------

    def dispatched_offset(self) -> int:
        return self._offset

    def dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        for r in records:
            if not self.topics or r.topic in self.topics:
                line = AuditLine(
                    r.physical_offset, r.store_timestamp, r.topic, r.queue_id, r.queue_offset, r.msg_id,
                    r.body_length, r.born_host,
                )  # fmt: skip
                self._pending.append(line.text())
        self._offset = end_offset

    async def persist(self, *, thorough: bool) -> None:
        async with self._saving:
            lines, self._pending = self._pending, []
            offset = self._offset
            await trio.to_thread.run_sync(self._save, lines, offset, thorough)

    def truncate(self, offset: int) -> None:
        """The log was cut at ``offset``: forget the records at or past it."""
        self._pending = [line for line in self._pending if int(line.split(" ", 1)[0]) < offset]
        self._cut_file(offset)
        self._offset = min(self._offset, offset)
        self._write_progress(self._offset)

    # --- files -------------------------------------------------------------------------------

    def _save(self, lines: list[str], offset: int, thorough: bool) -> None:
        with self.file.open("a") as file:
            file.writelines(lines)
            file.flush()
            if thorough:
                os.fsync(file.fileno())
        self._write_progress(offset)

    def _write_progress(self, offset: int) -> None:
        temporary = self.progress_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"offset": offset}))
        os.replace(temporary, self.progress_file)

    def _cut_file(self, offset: int) -> None:
        """Drop the file's lines at or past log ``offset`` (lines are in log order)."""
        if not self.file.exists():
            return
        keep = 0
        with self.file.open("rb") as file:
            for line in file:
                if not line.endswith(b"\n") or int(line.split(b" ", 1)[0]) >= offset:
                    break
                keep += len(line)
        if keep < self.file.stat().st_size:
            os.truncate(self.file, keep)


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("acme_audit", AuditConfig)]


@hookimpl
def trocket_register_dispatchers(ctx: BrokerContext, store: MessageStore) -> list[AuditView]:
    return [AuditView(ctx.data_dir / DIRECTORY, ctx.plugin_config(AuditConfig).topics)]
