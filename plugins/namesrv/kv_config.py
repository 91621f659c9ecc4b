"""NameServer KV config (namespace → key → value), persisted to ``kvConfig.json``."""

from __future__ import annotations

from pathlib import Path

import attrs

from kernel.persist import JsonStateFile, read_json_with_backup


@attrs.define
class KvConfig:
    path: Path
    table: dict[str, dict[str, str]] = attrs.field(factory=dict)
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    @classmethod
    def load(cls, path: Path) -> KvConfig:
        data = read_json_with_backup(path) or {}
        table = data.get("configTable", {}) if isinstance(data, dict) else {}
        return cls(path, {ns: {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()})

    async def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        await self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str]:
        return dict(self.table.get(namespace, {}))

    async def delete(self, namespace: str, key: str) -> None:
        values = self.table.get(namespace)
        if values is not None and values.pop(key, None) is not None:
            if not values:
                del self.table[namespace]
            await self._persist()

    async def _persist(self) -> None:
        await self._file.write({"configTable": self.table})
