"""Committed consumer offsets (``config/consumerOffset.json``), RocketMQ's ConsumerOffsetManager.

Offsets are "next to consume" queue offsets per (group, topic, queue). They change with
every commit, so they are written periodically and at shutdown, not per commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kernel.persist import JsonStateFile, lenient_json_keys, read_json_with_backup


def _key(topic: str, group: str) -> str:
    return f"{topic}@{group}"


@attrs.define(eq=False)
class ConsumerOffsetManager:
    path: Path
    table: dict[str, dict[int, int]] = attrs.field(factory=dict)
    dirty: bool = False
    pulled: dict[str, dict[int, int]] = attrs.field(factory=dict)
    """RocketMQ's ``pullOffsetTable``: the next offset each group's last pull of a queue was
    answered with, in memory only (what consumers hold and have not committed: in flight)."""
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    @classmethod
    def load(cls, path: Path) -> ConsumerOffsetManager:
        data = read_json_with_backup(path, preprocess=lenient_json_keys) or {}
        manager = cls(path)
        for key, queues in (data.get("offsetTable") or {}).items():
            manager.table[key] = {int(q): int(o) for q, o in queues.items()}
        return manager

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(_key(topic, group), {}).get(queue_id)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(_key(topic, group), {})[queue_id] = offset
        self.dirty = True

    def record_pull(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """A pull of the queue by ``group`` was answered up to ``next_offset``."""
        queues = self.pulled.get(key := _key(topic, group))
        if queues is None:
            queues = self.pulled[key] = {}
        queues[queue_id] = next_offset

    def pulled_queues(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.pulled.get(_key(topic, group), {}))

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = f"{topic}@"
        return sorted(key[len(prefix) :] for key in self.table if key.startswith(prefix))

    def topics_of_group(self, group: str) -> list[str]:
        suffix = f"@{group}"
        return sorted(key[: -len(suffix)] for key in self.table if key.endswith(suffix))

    def queues(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(_key(topic, group), {}))

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k.startswith(f"{topic}@")]:
            del self.table[key]
            self.dirty = True
        for key in [k for k in self.pulled if k.startswith(f"{topic}@")]:
            del self.pulled[key]

    def snapshot(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                key: {str(q): o for q, o in sorted(v.items())} for key, v in sorted(self.table.items())
            }
        }

    async def persist(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        snapshot = self.snapshot()
        try:
            await self._file.write(snapshot)
        except BaseException:
            self.dirty = True
            raise
