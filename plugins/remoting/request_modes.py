"""How each (topic, group) consumes, PULL or POP (``config/messageRequestMode.json``), RocketMQ 5's
MessageRequestModeManager: set by SET_MESSAGE_REQUEST_MODE, read by QUERY_ASSIGNMENT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kernel.persist import JsonStateFile, read_json_with_backup

DEFAULT_MODE = "PULL"
"""RocketMQ's ``defaultMessageRequestMode``."""


@attrs.define(eq=False)
class RequestModes:
    path: Path
    modes: dict[str, dict[str, dict[str, Any]]] = attrs.field(factory=dict)
    """topic → group → {"mode", "popShareQueueNum"} (RocketMQ's file layout)."""
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    @classmethod
    def load(cls, path: Path) -> RequestModes:
        data = read_json_with_backup(path) or {}
        table = data.get("messageRequestModeMap") if isinstance(data, dict) else None
        modes = cls(path)
        for topic, groups in (table or {}).items():
            if isinstance(groups, dict):
                modes.modes[str(topic)] = {
                    str(g): {
                        "mode": str(v.get("mode", DEFAULT_MODE)),
                        "popShareQueueNum": int(v.get("popShareQueueNum", 0)),
                    }
                    for g, v in groups.items()
                    if isinstance(v, dict)
                }
        return modes

    def mode(self, topic: str, group: str) -> tuple[str, int]:
        """(mode, popShareQueueNum) of the pair; PULL when never set."""
        entry = self.modes.get(topic, {}).get(group)
        if entry is None:
            return DEFAULT_MODE, 0
        return entry["mode"], entry["popShareQueueNum"]

    def set(self, topic: str, group: str, mode: str, share: int) -> None:
        self.modes.setdefault(topic, {})[group] = {
            "topic": topic, "consumerGroup": group, "mode": mode, "popShareQueueNum": share
        }  # fmt: skip

    async def persist(self) -> None:
        await self._file.write({"messageRequestModeMap": self.modes})
